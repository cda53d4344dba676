// shapefn-run: runs a saved executable on .npy inputs with no Python in the
// process, writes the outputs as .npy files and prints the counters as JSON.
// It uses only the embedding API (shapefn/shapefn.h), as another program would.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <exception>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <numeric>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include "json.h"
#include "npy.h"
#include "profile_report.h"
#include "shapefn/shapefn.h"

namespace {

using shapefn::tools::JsonNumber;
using shapefn::tools::JsonString;

constexpr int kExitFailure = 1;  // the program could not be loaded or run
constexpr int kExitUsage = 2;    // the command line is wrong

constexpr const char* kUsage =
    "usage: shapefn-run EXE --device DEVICE --input A.npy [--input B.npy ...] --output-dir DIR\n"
    "                   [--repeat N] [--function NAME] [--dependence per-input|per-op]\n"
    "                   [--profile] [--profile-trace TRACE.json]\n"
    "\n"
    "Runs function NAME (default main) of the saved executable EXE (and the kernel\n"
    "library saved beside it) on the inputs, in order, N times (default 1). Writes the\n"
    "outputs of the last call to DIR/out0.npy, DIR/out1.npy, ... (a tuple result\n"
    "flattened depth-first; a shape as int64 [ndim], an int as an int64 scalar) and\n"
    "prints the counters of all calls as JSON.\n"
    "\n"
    "DEVICE is sim, host, or KIND[:N] with KIND a TVM device kind: opencl, cuda, rocm, vulkan, metal, cpu\n"
    "(the Nth such device, default 0); it must be a device of the kind EXE was compiled\n"
    "for. cuda loads TVM's CUDA runtime (libtvm_runtime_cuda.so, beside libtvm_runtime.so),\n"
    "which needs the NVIDIA driver and the CUDA 13 runtime (libcudart.so.13).\n"
    "\n"
    "--profile profiles the last call: its table (per op: host time, time on the device\n"
    "where the device measures it, percent, count) goes to stderr, its rows to the\n"
    "JSON's \"profile\" key. --profile-trace also writes its Chrome trace (as\n"
    "shapefn's ProfileReport.to_chrome_trace) to TRACE.json.\n";

struct UsageError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

struct Options {
  std::string executable;
  std::string device;
  std::vector<std::string> inputs;
  std::string output_dir;
  int64_t repeat = 1;
  std::string function = "main";
  shapefn::Dependence dependence = shapefn::Dependence::kPerInput;
  bool profile = false;
  std::string profile_trace;
};

// sim, host, or a kind of device whose code an executable may hold.
bool IsDeviceName(const std::string& name) {
  try {
    const std::string code = shapefn::DeviceCodeOfName(name);
    return !code.empty() && shapefn::IsDeviceCode(code);
  } catch (const shapefn::Error&) {
    return false;  // an index that is not a number
  }
}

int64_t ParseRepeat(const std::string& text) {
  size_t used = 0;
  long long n = 0;
  try {
    n = std::stoll(text, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  if (used != text.size() || used == 0 || n < 1) {
    throw UsageError("--repeat takes a positive integer, got '" + text + "'");
  }
  return n;
}

Options ParseArgs(int argc, char** argv) {
  Options o;
  bool have_device = false, have_output_dir = false;
  for (int i = 1; i < argc; ++i) {
    std::string arg = argv[i];
    std::string value;
    bool inline_value = false;
    if (arg.rfind("--", 0) == 0) {
      size_t eq = arg.find('=');
      if (eq != std::string::npos) {
        value = arg.substr(eq + 1);
        arg = arg.substr(0, eq);
        inline_value = true;
      }
    }
    auto next = [&]() -> std::string {
      if (inline_value) return value;
      if (i + 1 >= argc) throw UsageError(arg + " needs a value");
      return argv[++i];
    };
    if (arg == "--device") {
      o.device = next();
      if (!IsDeviceName(o.device)) {
        throw UsageError(
            "--device must be 'sim', 'host' or KIND[:N] with KIND a TVM device kind (opencl, cuda, "
            "rocm, vulkan, metal, cpu), got '" +
            o.device + "'");
      }
      have_device = true;
    } else if (arg == "--input") {
      o.inputs.push_back(next());
    } else if (arg == "--output-dir") {
      o.output_dir = next();
      have_output_dir = true;
    } else if (arg == "--repeat") {
      o.repeat = ParseRepeat(next());
    } else if (arg == "--function") {
      o.function = next();
    } else if (arg == "--dependence") {
      std::string mode = next();
      if (mode == "per-input") {
        o.dependence = shapefn::Dependence::kPerInput;
      } else if (mode == "per-op") {
        o.dependence = shapefn::Dependence::kPerOp;
      } else {
        throw UsageError("--dependence must be 'per-input' or 'per-op', got '" + mode + "'");
      }
    } else if (arg == "--profile") {
      if (inline_value) throw UsageError("--profile takes no value");
      o.profile = true;
    } else if (arg == "--profile-trace") {
      o.profile_trace = next();
      o.profile = true;
    } else if (arg.rfind("-", 0) == 0 && arg.size() > 1) {
      throw UsageError("unknown option '" + arg + "'");
    } else if (o.executable.empty()) {
      o.executable = arg;
    } else {
      throw UsageError("unexpected argument '" + arg + "' (one executable, inputs go after --input)");
    }
  }
  if (o.executable.empty()) throw UsageError("no executable given");
  if (!have_device) throw UsageError("--device is required");
  if (!have_output_dir) throw UsageError("--output-dir is required");
  return o;
}

// The same names as VirtualMachine.counters in Python.
std::string CountersJson(const shapefn::Counters& c, const std::string& indent) {
  std::ostringstream os;
  os << "{";
#define SHAPEFN_COUNTER_JSON(name) os << "\n" << indent << "  \"" #name "\": " << c.name << ",";
  SHAPEFN_INT_COUNTERS(SHAPEFN_COUNTER_JSON)
#undef SHAPEFN_COUNTER_JSON
  os << "\n" << indent << "  \"modelled_transfer_s\": " << JsonNumber(c.modelled_transfer_s) << "\n" << indent << "}";
  return os.str();
}

// Tuples nested deeper than this are refused rather than walked (the walk
// recurses); the Python VM refuses the same depth with RecursionError.
constexpr int kMaxOutputNesting = 1000;

// Writes `value` as out<k>.npy files, tuples flattened depth-first.
void WriteOutputs(const shapefn::Value& value, const std::filesystem::path& dir, std::vector<std::string>* names,
                  int depth = 0) {
  using Kind = shapefn::Value::Kind;
  if (depth > kMaxOutputNesting) {
    throw std::runtime_error("the result nests tuples more than " + std::to_string(kMaxOutputNesting) +
                             " deep; shapefn-run cannot write it as out<k>.npy files");
  }
  const std::string name = "out" + std::to_string(names->size()) + ".npy";
  auto path = [&] { return (dir / name).string(); };
  switch (value.kind) {
    case Kind::kTensor: {
      const shapefn::TensorObj& t = *value.tensor;
      std::shared_ptr<void> host = shapefn::npy::AllocAligned(t.nbytes());
      shapefn::CopyTensorToHost(t, host.get());
      shapefn::npy::Write(path(), t.dtype, t.shape, host.get());
      break;
    }
    case Kind::kShape:
      shapefn::npy::Write(path(), DLDataType{kDLInt, 64, 1}, {static_cast<int64_t>(value.shape.size())},
                          value.shape.data());
      break;
    case Kind::kInt: shapefn::npy::Write(path(), DLDataType{kDLInt, 64, 1}, {}, &value.i); break;
    case Kind::kTuple:
      for (const shapefn::Value& field : *value.tuple) WriteOutputs(field, dir, names, depth + 1);
      return;
    case Kind::kEmpty: return;  // nothing to write (Python sees None)
  }
  names->push_back(name);
}

// The profiled call's trace to a file, its table to stderr, its rows to `json`.
void WriteProfile(const Options& o, const shapefn::Profiler& profiler, std::ostream& json) {
  if (!o.profile_trace.empty()) {
    std::ofstream trace(o.profile_trace);
    trace << shapefn::tools::ChromeTrace(profiler);
    if (!trace.flush()) {
      shapefn::Fail(shapefn::ErrorKind::kValue, "cannot write the profile trace to '" + o.profile_trace + "'");
    }
  }
  std::cerr << shapefn::tools::ProfileTable(profiler) << std::flush;
  json << ",\n  \"profile\": " << shapefn::tools::ProfileJson(profiler, "  ");
}

int Run(const Options& o) {
  // The executable says what it runs on: a mismatch is refused before the
  // device (for CUDA, its runtime) is opened or any kernel is loaded.
  std::shared_ptr<const shapefn::Executable> exe = shapefn::Executable::Load(o.executable);
  shapefn::RequireDeviceCode(*exe, shapefn::DeviceCodeOfName(o.device), o.device);
  std::shared_ptr<shapefn::Device> device = shapefn::MakeDevice(o.device);
  shapefn::Program program = shapefn::LoadProgram(exe, o.executable);
  std::vector<std::string> missing = shapefn::MissingShapeFuncs(*program.executable);
  if (!missing.empty()) {
    std::string names;
    for (const std::string& m : missing) names += (names.empty() ? "'" : ", '") + m + "'";
    shapefn::Fail(shapefn::ErrorKind::kKey,
                  "executable '" + o.executable +
                      "' calls shape functions that are neither built in nor carried by "
                      "it: " +
                      names +
                      ". shapefn.compile builds the shape functions a program calls into its "
                      "executable; a program built by hand runs with shapefn.VirtualMachine in a process "
                      "that registers them (shapefn.register_shape_func)");
  }
  const int function_index = program.executable->FunctionIndex(o.function);

  std::vector<shapefn::Value> args;
  for (const std::string& input : o.inputs) {
    shapefn::npy::Array a = shapefn::npy::Read(input);
    DLTensor view{
        a.data.get(), DLDevice{kDLCPU, 0}, static_cast<int32_t>(a.shape.size()), a.dtype, a.shape.data(), nullptr, 0};
    // The tensor owns the buffer: it is released when the VM and the
    // outputs (which on the host may be the input itself) let go of it.
    auto* owner = new std::shared_ptr<void>(a.data);
    args.push_back(shapefn::Value::Tensor(shapefn::WrapHostTensor(
        view, [](void* p) { delete static_cast<std::shared_ptr<void>*>(p); }, owner)));
  }

  shapefn::VMOptions options;
  options.dependence = o.dependence;
  shapefn::VirtualMachine vm(program.executable, device, options, program.kernels);

  // Each call ends when its outputs are computed (a call that returns device
  // tensors syncs first), so host time brackets the device work. The first
  // call also loads device code and warms caches: it is reported on its own.
  shapefn::Value result;
  shapefn::Profiler profiler;
  std::vector<double> call_s;
  for (int64_t i = 0; i < o.repeat; ++i) {
    auto start = std::chrono::steady_clock::now();
    result = vm.Invoke(function_index, args, o.profile && i + 1 == o.repeat ? &profiler : nullptr);
    vm.device(shapefn::kExecutionSlot)->Sync();
    call_s.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
  }
  const double seconds = std::accumulate(call_s.begin(), call_s.end(), 0.0);
  std::vector<double> sorted = call_s;
  std::sort(sorted.begin(), sorted.end());

  std::filesystem::path dir(o.output_dir);
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec || !std::filesystem::is_directory(dir)) {
    shapefn::Fail(shapefn::ErrorKind::kValue,
                  "cannot create output directory '" + o.output_dir + "'" + (ec ? ": " + ec.message() : ""));
  }
  std::vector<std::string> outputs;
  WriteOutputs(result, dir, &outputs);

  std::ostringstream os;
  os << "{\n  \"function\": " << JsonString(o.function) << ",\n  \"device\": " << JsonString(o.device)
     << ",\n  \"repeat\": " << o.repeat << ",\n  \"outputs\": [";
  for (size_t i = 0; i < outputs.size(); ++i) os << (i ? ", " : "") << JsonString(outputs[i]);
  os << "],\n  \"mean_call_s\": " << JsonNumber(seconds / static_cast<double>(o.repeat))
     << ",\n  \"first_call_s\": " << JsonNumber(call_s.front())
     << ",\n  \"median_call_s\": " << JsonNumber(sorted[sorted.size() / 2])
     << ",\n  \"counters\": " << CountersJson(vm.counters(), "  ")
     << ",\n  \"constant_counters\": " << CountersJson(vm.constant_counters(), "  ");
  if (o.profile) WriteProfile(o, profiler, os);
  os << "\n}\n";
  std::cout << os.str() << std::flush;
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  for (int i = 1; i < argc; ++i) {
    std::string arg = argv[i];
    if (arg == "-h" || arg == "--help") {
      std::cout << kUsage;
      return 0;
    }
  }
  Options options;
  try {
    options = ParseArgs(argc, argv);
  } catch (const UsageError& e) {
    std::cerr << kUsage << "\nshapefn-run: error: " << e.what() << "\n";
    return kExitUsage;
  }
  try {
    return Run(options);
  } catch (const shapefn::Error& e) {
    std::cerr << "shapefn-run: error: " << e.what() << "\n";
  } catch (const tvm::ffi::Error& e) {
    std::cerr << "shapefn-run: error: " << e.kind() << ": " << e.message() << "\n";
  } catch (const std::exception& e) {
    std::cerr << "shapefn-run: error: " << e.what() << "\n";
  }
  return kExitFailure;
}
