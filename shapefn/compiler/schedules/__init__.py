"""Scheduling kernels for the processor each runs on, between code
generation (which decides where each kernel runs) and the kernel cache
(which compiles what it is given): ``target_schedule.py`` picks a kernel's
GPU form and schedules it for GPUs; ``gpu_threads.py`` tells what a kernel
does in GPU threads and what it leaves to the host (what a device kernel is
checked for); ``cpu_schedule.py`` schedules the CPU kernels that reduce
(matmuls, convolutions)."""
