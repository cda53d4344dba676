// The part of the OpenCL 1.2 C API shapefn uses, reached through function
// pointers from the ICD loader (libOpenCL) opened at run time: building
// shapefn needs no OpenCL SDK, and a machine without OpenCL can still import
// it. Types and constants are declared here with the values the OpenCL
// specification gives them.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace shapefn::opencl {

using cl_int = int32_t;
using cl_uint = uint32_t;
using cl_ulong = uint64_t;
using cl_bool = cl_uint;
using cl_bitfield = cl_ulong;
using cl_device_type = cl_bitfield;
using cl_mem_flags = cl_bitfield;
using cl_command_queue_properties = cl_bitfield;
using cl_platform_info = cl_uint;
using cl_device_info = cl_uint;
using cl_program_build_info = cl_uint;
using cl_kernel_work_group_info = cl_uint;
using cl_event_info = cl_uint;
using cl_profiling_info = cl_uint;
using cl_buffer_create_type = cl_uint;
using cl_context_properties = intptr_t;

using cl_platform_id = struct _cl_platform_id*;
using cl_device_id = struct _cl_device_id*;
using cl_context = struct _cl_context*;
using cl_command_queue = struct _cl_command_queue*;
using cl_mem = struct _cl_mem*;
using cl_program = struct _cl_program*;
using cl_kernel = struct _cl_kernel*;
using cl_event = struct _cl_event*;

struct cl_buffer_region {
  size_t origin;
  size_t size;
};

constexpr cl_int CL_SUCCESS = 0;
constexpr cl_int CL_DEVICE_NOT_FOUND = -1;
constexpr cl_int CL_BUILD_PROGRAM_FAILURE = -11;
constexpr cl_int CL_PLATFORM_NOT_FOUND_KHR = -1001;
constexpr cl_bool CL_FALSE = 0;
constexpr cl_bool CL_TRUE = 1;

constexpr cl_platform_info CL_PLATFORM_VERSION = 0x0901;
constexpr cl_platform_info CL_PLATFORM_NAME = 0x0902;
constexpr cl_platform_info CL_PLATFORM_VENDOR = 0x0903;

constexpr cl_device_type CL_DEVICE_TYPE_CPU = 1 << 1;
constexpr cl_device_type CL_DEVICE_TYPE_GPU = 1 << 2;
constexpr cl_device_type CL_DEVICE_TYPE_ACCELERATOR = 1 << 3;
constexpr cl_device_type CL_DEVICE_TYPE_ALL = 0xFFFFFFFF;

constexpr cl_device_info CL_DEVICE_TYPE = 0x1000;
constexpr cl_device_info CL_DEVICE_MAX_COMPUTE_UNITS = 0x1002;
constexpr cl_device_info CL_DEVICE_MAX_WORK_GROUP_SIZE = 0x1004;
constexpr cl_device_info CL_DEVICE_MAX_WORK_ITEM_SIZES = 0x1005;
constexpr cl_device_info CL_DEVICE_MAX_CLOCK_FREQUENCY = 0x100C;
constexpr cl_device_info CL_DEVICE_MAX_MEM_ALLOC_SIZE = 0x1010;
constexpr cl_device_info CL_DEVICE_MEM_BASE_ADDR_ALIGN = 0x1019;
constexpr cl_device_info CL_DEVICE_GLOBAL_MEM_SIZE = 0x101F;
constexpr cl_device_info CL_DEVICE_LOCAL_MEM_SIZE = 0x1023;
constexpr cl_device_info CL_DEVICE_AVAILABLE = 0x1027;
constexpr cl_device_info CL_DEVICE_NAME = 0x102B;
constexpr cl_device_info CL_DEVICE_VENDOR = 0x102C;
constexpr cl_device_info CL_DRIVER_VERSION = 0x102D;
constexpr cl_device_info CL_DEVICE_VERSION = 0x102F;
constexpr cl_device_info CL_DEVICE_EXTENSIONS = 0x1030;

constexpr cl_context_properties CL_CONTEXT_PLATFORM = 0x1084;
constexpr cl_mem_flags CL_MEM_READ_WRITE = 1 << 0;
constexpr cl_buffer_create_type CL_BUFFER_CREATE_TYPE_REGION = 0x1220;
constexpr cl_program_build_info CL_PROGRAM_BUILD_LOG = 0x1183;
constexpr cl_kernel_work_group_info CL_KERNEL_WORK_GROUP_SIZE = 0x11B0;
constexpr cl_event_info CL_EVENT_COMMAND_EXECUTION_STATUS = 0x11D3;
constexpr cl_int CL_COMPLETE = 0x0;
constexpr cl_command_queue_properties CL_QUEUE_PROFILING_ENABLE = 1 << 1;
constexpr cl_profiling_info CL_PROFILING_COMMAND_START = 0x1282;
constexpr cl_profiling_info CL_PROFILING_COMMAND_END = 0x1283;

// Entry points, resolved by name from the ICD loader.
#define SHAPEFN_CL_FUNCTIONS(X)                                                                                     \
  X(clGetPlatformIDs, cl_int, (cl_uint, cl_platform_id*, cl_uint*))                                                 \
  X(clGetPlatformInfo, cl_int, (cl_platform_id, cl_platform_info, size_t, void*, size_t*))                          \
  X(clGetDeviceIDs, cl_int, (cl_platform_id, cl_device_type, cl_uint, cl_device_id*, cl_uint*))                     \
  X(clGetDeviceInfo, cl_int, (cl_device_id, cl_device_info, size_t, void*, size_t*))                                \
  X(clCreateContext, cl_context,                                                                                    \
    (const cl_context_properties*, cl_uint, const cl_device_id*, void (*)(const char*, const void*, size_t, void*), \
     void*, cl_int*))                                                                                               \
  X(clReleaseContext, cl_int, (cl_context))                                                                         \
  X(clCreateCommandQueue, cl_command_queue, (cl_context, cl_device_id, cl_command_queue_properties, cl_int*))       \
  X(clReleaseCommandQueue, cl_int, (cl_command_queue))                                                              \
  X(clCreateBuffer, cl_mem, (cl_context, cl_mem_flags, size_t, void*, cl_int*))                                     \
  X(clCreateSubBuffer, cl_mem, (cl_mem, cl_mem_flags, cl_buffer_create_type, const void*, cl_int*))                 \
  X(clReleaseMemObject, cl_int, (cl_mem))                                                                           \
  X(clEnqueueReadBuffer, cl_int,                                                                                    \
    (cl_command_queue, cl_mem, cl_bool, size_t, size_t, void*, cl_uint, const cl_event*, cl_event*))                \
  X(clEnqueueWriteBuffer, cl_int,                                                                                   \
    (cl_command_queue, cl_mem, cl_bool, size_t, size_t, const void*, cl_uint, const cl_event*, cl_event*))          \
  X(clEnqueueCopyBuffer, cl_int,                                                                                    \
    (cl_command_queue, cl_mem, cl_mem, size_t, size_t, size_t, cl_uint, const cl_event*, cl_event*))                \
  X(clFinish, cl_int, (cl_command_queue))                                                                           \
  X(clFlush, cl_int, (cl_command_queue))                                                                            \
  X(clCreateProgramWithSource, cl_program, (cl_context, cl_uint, const char**, const size_t*, cl_int*))             \
  X(clBuildProgram, cl_int,                                                                                         \
    (cl_program, cl_uint, const cl_device_id*, const char*, void (*)(cl_program, void*), void*))                    \
  X(clGetProgramBuildInfo, cl_int, (cl_program, cl_device_id, cl_program_build_info, size_t, void*, size_t*))       \
  X(clReleaseProgram, cl_int, (cl_program))                                                                         \
  X(clCreateKernel, cl_kernel, (cl_program, const char*, cl_int*))                                                  \
  X(clReleaseKernel, cl_int, (cl_kernel))                                                                           \
  X(clSetKernelArg, cl_int, (cl_kernel, cl_uint, size_t, const void*))                                              \
  X(clGetKernelWorkGroupInfo, cl_int, (cl_kernel, cl_device_id, cl_kernel_work_group_info, size_t, void*, size_t*)) \
  X(clEnqueueNDRangeKernel, cl_int,                                                                                 \
    (cl_command_queue, cl_kernel, cl_uint, const size_t*, const size_t*, const size_t*, cl_uint, const cl_event*,   \
     cl_event*))                                                                                                    \
  X(clGetEventInfo, cl_int, (cl_event, cl_event_info, size_t, void*, size_t*))                                      \
  X(clGetEventProfilingInfo, cl_int, (cl_event, cl_profiling_info, size_t, void*, size_t*))                         \
  X(clWaitForEvents, cl_int, (cl_uint, const cl_event*))                                                            \
  X(clRetainEvent, cl_int, (cl_event))                                                                              \
  X(clReleaseEvent, cl_int, (cl_event))

struct ClApi {
#define SHAPEFN_CL_DECLARE(name, result, params) result(*name) params = nullptr;
  SHAPEFN_CL_FUNCTIONS(SHAPEFN_CL_DECLARE)
#undef SHAPEFN_CL_DECLARE
};

// The API of the first ICD loader that opens (SHAPEFN_OPENCL_LIBRARY if set,
// else libOpenCL.so.1, libOpenCL.so), or nullptr with `why_not` saying what
// is missing and what to install. Opened once per process.
const ClApi* LoadClApi(std::string* why_not);

// "CL_OUT_OF_RESOURCES (-5)" for an error code.
std::string ClErrorString(cl_int code);

}  // namespace shapefn::opencl
