"""Scheduling kernels for the processor each runs on, between code
generation (which decides where each kernel runs) and the kernel cache
(which compiles what it is given): ``target_schedule.py`` picks a kernel's
GPU form and schedules it for GPUs; ``cpu_schedule.py`` schedules the CPU
kernels that reduce (matmuls, convolutions)."""
