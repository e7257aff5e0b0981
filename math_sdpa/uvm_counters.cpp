// uvm_counters.cpp: CUPTI's Unified Memory counters, loaded at run time (see uvm_counters.h).
//
// CUPTI hands its records over in buffers, on its own thread: buffer_completed keeps each record's
// kind, value and address under one mutex, and stop() attributes them to the named ranges only at
// the end, because ranges are often named after their traffic (the ballast is allocated and
// touched after start()).
#include "uvm_counters.h"

#include <cuda_runtime.h>
#include <cupti.h>  // the types, enums and function signatures only: the functions come through dlsym
#include <dlfcn.h>

#include <cstdlib>
#include <iterator>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

namespace sdpa {

struct UvmCollector {
  struct Record {
    CUpti_ActivityUnifiedMemoryCounterKind kind;
    uint64_t value, address;
  };
  struct NamedRange {
    std::string name;
    uintptr_t begin, end;
  };
  std::vector<Record> records;  // kept until stop(): 24 bytes a record
  int64_t dropped = 0;
  std::vector<NamedRange> ranges;
  uint32_t counted_kinds = 0;  // bit k: CUPTI accepted counter kind k
  bool counts(CUpti_ActivityUnifiedMemoryCounterKind kind) const {
    return kind >= 0 && kind < 32 && ((counted_kinds >> kind) & 1u);
  }
  bool counting = false;       // CUPTI was enabled for this collector and not yet stopped
};

namespace {

// The CUPTI functions used. Linked, CUPTI would be one more library every run needs, for a
// measurement that is optional; looked up at run time, its absence is one line in the result.
struct CuptiApi {
  decltype(&cuptiGetResultString) get_result_string = nullptr;
  decltype(&cuptiActivityRegisterCallbacks) register_callbacks = nullptr;
  decltype(&cuptiActivityConfigureUnifiedMemoryCounter) configure_unified_memory_counter = nullptr;
  decltype(&cuptiActivityEnable) enable = nullptr;
  decltype(&cuptiActivityDisable) disable = nullptr;
  decltype(&cuptiActivityFlushAll) flush_all = nullptr;
  decltype(&cuptiActivityGetNextRecord) get_next_record = nullptr;
  decltype(&cuptiActivityGetNumDroppedRecords) get_num_dropped_records = nullptr;
};

struct LoadedCupti {
  CuptiApi api;
  std::string missing;       // why it cannot be used; empty when it can
  bool not_found = false;    // no library at all (as opposed to one without these functions)
};

// Where the toolkit puts libcupti when the library path does not name it.
std::vector<std::string> cupti_candidates() {
  const char* files[] = {"libcupti.so.13", "libcupti.so"};
  const char* folders[] = {
      "/usr/local/cuda/lib64", "/usr/local/cuda/lib", "/usr/local/cuda/extras/CUPTI/lib64",
#if defined(__x86_64__)
      "/usr/local/cuda/targets/x86_64-linux/lib",
#elif defined(__aarch64__)
      "/usr/local/cuda/targets/sbsa-linux/lib", "/usr/local/cuda/targets/aarch64-linux/lib",
#endif
  };
  std::vector<std::string> names(std::begin(files), std::end(files));
  for (const char* folder : folders) {
    for (const char* file : files) names.push_back(std::string(folder) + "/" + file);
  }
  return names;
}

template <typename Function>
void resolve(void* library, const char* name, Function& function, std::string& missing) {
  function = reinterpret_cast<Function>(dlsym(library, name));
  if (!function && missing.empty()) missing = std::string("the CUPTI library found has no ") + name;
}

LoadedCupti load_cupti() {
  LoadedCupti loaded;
  void* library = nullptr;
  std::string first_error;
  for (const std::string& name : cupti_candidates()) {
    // Never closed: CUPTI leaves threads and exit handlers in the process.
    library = dlopen(name.c_str(), RTLD_LAZY | RTLD_LOCAL);
    if (library) break;
    if (first_error.empty()) first_error = dlerror();
  }
  if (!library) {
    loaded.missing = "CUPTI not found (no libcupti.so.13 or libcupti.so on the library path or under /usr/local/cuda: " +
                     first_error + ")";
    loaded.not_found = true;
    return loaded;
  }
  CuptiApi& api = loaded.api;
  resolve(library, "cuptiGetResultString", api.get_result_string, loaded.missing);
  resolve(library, "cuptiActivityRegisterCallbacks", api.register_callbacks, loaded.missing);
  resolve(library, "cuptiActivityConfigureUnifiedMemoryCounter", api.configure_unified_memory_counter, loaded.missing);
  resolve(library, "cuptiActivityEnable", api.enable, loaded.missing);
  resolve(library, "cuptiActivityDisable", api.disable, loaded.missing);
  resolve(library, "cuptiActivityFlushAll", api.flush_all, loaded.missing);
  resolve(library, "cuptiActivityGetNextRecord", api.get_next_record, loaded.missing);
  resolve(library, "cuptiActivityGetNumDroppedRecords", api.get_num_dropped_records, loaded.missing);
  return loaded;
}

const LoadedCupti& cupti() {
  static const LoadedCupti loaded = load_cupti();
  return loaded;
}

std::string result_name(CUptiResult result) {
  const char* name = nullptr;
  if (cupti().api.get_result_string(result, &name) == CUPTI_SUCCESS && name) return name;
  return "CUptiResult " + std::to_string(static_cast<int>(result));
}

// CUPTI's answers that mean this machine or setup cannot count, as opposed to a misuse or a failure.
bool means_unsupported(CUptiResult result) {
  switch (result) {
    case CUPTI_ERROR_NOT_SUPPORTED:
    case CUPTI_ERROR_NOT_COMPATIBLE:  // something else holds the activity API in a conflicting way
    case CUPTI_ERROR_UM_PROFILING_NOT_SUPPORTED:
    case CUPTI_ERROR_UM_PROFILING_NOT_SUPPORTED_ON_DEVICE:
    case CUPTI_ERROR_UM_PROFILING_NOT_SUPPORTED_ON_NON_P2P_DEVICES:
    case CUPTI_ERROR_UM_PROFILING_NOT_SUPPORTED_WITH_MPS:
    case CUPTI_ERROR_VIRTUALIZED_DEVICE_NOT_SUPPORTED:
    case CUPTI_ERROR_INSUFFICIENT_PRIVILEGES:
    case CUPTI_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED:  // Nsight Systems or Compute, cuda-gdb, compute-sanitizer
    case CUPTI_ERROR_VIRTUALIZED_DEVICE_INSUFFICIENT_PRIVILEGES:
    case CUPTI_ERROR_CONFIDENTIAL_COMPUTING_NOT_SUPPORTED:
    case CUPTI_ERROR_CMP_DEVICE_NOT_SUPPORTED:
    case CUPTI_ERROR_MIG_DEVICE_NOT_SUPPORTED:
    case CUPTI_ERROR_SLI_DEVICE_NOT_SUPPORTED:
    case CUPTI_ERROR_WSL_DEVICE_NOT_SUPPORTED:
      return true;
    default:
      return false;
  }
}

std::mutex g_mutex;                   // guards g_collector and every UvmCollector's contents
UvmCollector* g_collector = nullptr;  // the one counting, if any: CUPTI's buffers are process-wide

// ~10,000 records of CUDA 13's 104 bytes; CUPTI asks for another when one fills.
constexpr size_t kBufferBytes = size_t{1} << 20;

void CUPTIAPI buffer_requested(uint8_t** buffer, size_t* size, size_t* max_records) {
  *buffer = static_cast<uint8_t*>(std::aligned_alloc(ACTIVITY_RECORD_ALIGNMENT, kBufferBytes));
  *size = *buffer ? kBufferBytes : 0;  // none: CUPTI drops the records and counts them as dropped
  *max_records = 0;                    // as many as fit
}

void CUPTIAPI buffer_completed(CUcontext, uint32_t, uint8_t* buffer, size_t, size_t valid_bytes) {
  const CuptiApi& api = cupti().api;
  std::vector<UvmCollector::Record> batch;
  CUpti_Activity* record = nullptr;
  while (api.get_next_record(buffer, valid_bytes, &record) == CUPTI_SUCCESS) {
    if (record->kind != CUPTI_ACTIVITY_KIND_UNIFIED_MEMORY_COUNTER) continue;
    // CUDA 13's record; the fields read here have the same offsets in CUpti_ActivityUnifiedMemoryCounter2
    // (CUDA 7.0 to 12.x), so an older libcupti found as libcupti.so reads the same.
    const auto* um = reinterpret_cast<const CUpti_ActivityUnifiedMemoryCounter3*>(record);
    batch.push_back({um->counterKind, um->value, um->address});
  }
  size_t dropped = 0;
  if (api.get_num_dropped_records(nullptr, 0, &dropped) != CUPTI_SUCCESS) dropped = 0;
  std::free(buffer);
  std::lock_guard<std::mutex> lock(g_mutex);
  if (!g_collector) return;  // a flush after stop(): no one is counting
  g_collector->records.insert(g_collector->records.end(), batch.begin(), batch.end());
  g_collector->dropped += static_cast<int64_t>(dropped);
}

struct CounterKind {
  CUpti_ActivityUnifiedMemoryCounterKind kind;
  const char* name;
  bool required;  // without it the counts say nothing the result needs
};
constexpr CounterKind kCounterKinds[] = {
    {CUPTI_ACTIVITY_UNIFIED_MEMORY_COUNTER_KIND_BYTES_TRANSFER_HTOD, "BYTES_TRANSFER_HTOD", true},
    {CUPTI_ACTIVITY_UNIFIED_MEMORY_COUNTER_KIND_BYTES_TRANSFER_DTOH, "BYTES_TRANSFER_DTOH", true},
    {CUPTI_ACTIVITY_UNIFIED_MEMORY_COUNTER_KIND_CPU_PAGE_FAULT_COUNT, "CPU_PAGE_FAULT_COUNT", false},
    {CUPTI_ACTIVITY_UNIFIED_MEMORY_COUNTER_KIND_GPU_PAGE_FAULT, "GPU_PAGE_FAULT", false},
    {CUPTI_ACTIVITY_UNIFIED_MEMORY_COUNTER_KIND_THRASHING, "THRASHING", false},
    {CUPTI_ACTIVITY_UNIFIED_MEMORY_COUNTER_KIND_THROTTLING, "THROTTLING", false},
    {CUPTI_ACTIVITY_UNIFIED_MEMORY_COUNTER_KIND_REMOTE_MAP, "REMOTE_MAP", false},
};

// The collected records summed per kind and attributed to the named ranges.
void sum_records(const UvmCollector& collected, UvmCounts& counts) {
  std::vector<size_t> slot;  // collected.ranges[i] counts for counts.ranges[slot[i]]
  for (const auto& range : collected.ranges) {
    size_t s = 0;
    while (s < counts.ranges.size() && counts.ranges[s].name != range.name) ++s;
    if (s == counts.ranges.size()) counts.ranges.push_back({range.name});
    slot.push_back(s);
  }
  size_t other = 0;
  while (other < counts.ranges.size() && counts.ranges[other].name != "other") ++other;
  if (other == counts.ranges.size()) counts.ranges.push_back({"other"});

  counts.records = static_cast<int64_t>(collected.records.size());
  counts.dropped_records = collected.dropped;
  for (const auto& record : collected.records) {
    if (!collected.counts(record.kind)) continue;  // a kind CUPTI refused to configure
    size_t s = other;
    for (size_t i = 0; i < collected.ranges.size(); ++i) {
      if (record.address >= collected.ranges[i].begin && record.address < collected.ranges[i].end) {
        s = slot[i];
        break;
      }
    }
    UvmRangeCounts& range = counts.ranges[s];
    const auto value = static_cast<int64_t>(record.value);
    switch (record.kind) {
      case CUPTI_ACTIVITY_UNIFIED_MEMORY_COUNTER_KIND_BYTES_TRANSFER_HTOD:
        counts.bytes_htod += value;
        range.bytes_htod += value;
        break;
      case CUPTI_ACTIVITY_UNIFIED_MEMORY_COUNTER_KIND_BYTES_TRANSFER_DTOH:
        counts.bytes_dtoh += value;
        range.bytes_dtoh += value;
        break;
      // A fault's value is not a count (the faulting instruction's address for the CPU, the
      // fault groups on that page for the GPU): each record is one fault.
      case CUPTI_ACTIVITY_UNIFIED_MEMORY_COUNTER_KIND_CPU_PAGE_FAULT_COUNT:
        ++counts.cpu_page_faults;
        ++range.cpu_page_faults;
        break;
      case CUPTI_ACTIVITY_UNIFIED_MEMORY_COUNTER_KIND_GPU_PAGE_FAULT:
        ++counts.gpu_page_faults;
        ++range.gpu_page_faults;
        break;
      case CUPTI_ACTIVITY_UNIFIED_MEMORY_COUNTER_KIND_THRASHING:
        ++counts.thrashing;
        break;
      case CUPTI_ACTIVITY_UNIFIED_MEMORY_COUNTER_KIND_THROTTLING:
        ++counts.throttling;
        break;
      case CUPTI_ACTIVITY_UNIFIED_MEMORY_COUNTER_KIND_REMOTE_MAP:
        ++counts.remote_map;
        break;
      default:
        break;
    }
  }
}

}  // namespace

const UvmRangeCounts* UvmCounts::range(const std::string& name) const {
  for (const UvmRangeCounts& r : ranges) {
    if (r.name == name) return &r;
  }
  return nullptr;
}

UvmCounters::UvmCounters() : collector_(std::make_unique<UvmCollector>()) {}

UvmCounters::~UvmCounters() { stop(); }

std::unique_ptr<UvmCounters> UvmCounters::start() {
  std::unique_ptr<UvmCounters> counters(new UvmCounters());
  counters->begin();
  return counters;
}

// Enables CUPTI's counters for this object, or says in result_ why it cannot.
void UvmCounters::begin() {
  auto refuse = [this](std::string why, bool unsupported) {
    result_.unavailable = std::move(why);
    result_.unsupported = unsupported;
  };
  // Also initialises the driver, which CUPTI's header asks for before configuring the counters.
  int devices = 0;
  const cudaError_t status = cudaGetDeviceCount(&devices);
  if (status != cudaSuccess || devices == 0) {
    return refuse(std::string("no usable CUDA device (") +
                      (status != cudaSuccess ? cudaGetErrorName(status) : "none found") + ")",
                  true);
  }
  const LoadedCupti& loaded = cupti();
  if (!loaded.missing.empty()) return refuse(loaded.missing, loaded.not_found);
  const CuptiApi& api = loaded.api;
  {
    std::lock_guard<std::mutex> lock(g_mutex);
    if (g_collector) return refuse("another UvmCounters is counting (CUPTI's activity buffers are process-wide)", false);
    g_collector = collector_.get();  // claimed before CUPTI is set up, so that a second start() sees it
  }
  auto failed = [&](const std::string& call, CUptiResult result) {
    std::lock_guard<std::mutex> lock(g_mutex);
    g_collector = nullptr;
    refuse(call + ": " + result_name(result), means_unsupported(result));
  };

  // CUPTI keeps one pair of callbacks per process, so they are registered once, on first use.
  static const CUptiResult registered = api.register_callbacks(buffer_requested, buffer_completed);
  if (registered != CUPTI_SUCCESS) return failed("cuptiActivityRegisterCallbacks", registered);

  // Each call passes the kinds accepted so far plus one: the kind CUPTI refuses is named, and the
  // last successful call configured exactly the kinds kept.
  std::vector<CUpti_ActivityUnifiedMemoryCounterConfig> accepted;
  for (const CounterKind& k : kCounterKinds) {
    CUpti_ActivityUnifiedMemoryCounterConfig config{};
    config.scope = CUPTI_ACTIVITY_UNIFIED_MEMORY_COUNTER_SCOPE_PROCESS_SINGLE_DEVICE;  // ignored since CUDA 7.0
    config.kind = k.kind;
    config.deviceId = 0;  // likewise
    config.enable = 1;
    accepted.push_back(config);
    const CUptiResult result =
        api.configure_unified_memory_counter(accepted.data(), static_cast<uint32_t>(accepted.size()));
    if (result == CUPTI_SUCCESS) {
      collector_->counted_kinds |= uint32_t{1} << k.kind;
      continue;
    }
    accepted.pop_back();
    if (k.required) return failed(std::string("cuptiActivityConfigureUnifiedMemoryCounter(") + k.name + ")", result);
    if (!result_.not_counted.empty()) result_.not_counted += ", ";
    result_.not_counted += std::string(k.name) + " (" + result_name(result) + ")";
  }
  const CUptiResult result = api.enable(CUPTI_ACTIVITY_KIND_UNIFIED_MEMORY_COUNTER);
  if (result != CUPTI_SUCCESS) return failed("cuptiActivityEnable(CUPTI_ACTIVITY_KIND_UNIFIED_MEMORY_COUNTER)", result);
  collector_->counting = true;
  result_.available = true;
}

void UvmCounters::name_range(const std::string& name, const void* base, size_t bytes) {
  const auto begin = reinterpret_cast<uintptr_t>(base);
  std::lock_guard<std::mutex> lock(g_mutex);
  collector_->ranges.push_back({name, begin, begin + bytes});
}

UvmCounts UvmCounters::stop() {
  if (stopped_) return result_;
  stopped_ = true;
  if (!collector_->counting) return result_;  // start() could not count: result_ says why
  const CuptiApi& api = cupti().api;
  // Flushed before and after disabling, so that records made up to the disable arrive whether
  // CUPTI delivers them on the first flush or only once collection has stopped. Forced: buffers
  // with records still incomplete come too (the GPU is not synchronized here).
  const CUptiResult flushed = api.flush_all(CUPTI_ACTIVITY_FLAG_FLUSH_FORCED);
  const CUptiResult disabled = api.disable(CUPTI_ACTIVITY_KIND_UNIFIED_MEMORY_COUNTER);
  const CUptiResult flushed_again = api.flush_all(CUPTI_ACTIVITY_FLAG_FLUSH_FORCED);
  UvmCollector collected;
  {
    std::lock_guard<std::mutex> lock(g_mutex);
    g_collector = nullptr;
    collected = std::move(*collector_);
  }
  collector_->counting = false;
  if (flushed != CUPTI_SUCCESS || flushed_again != CUPTI_SUCCESS) {
    result_.available = false;
    result_.unavailable = "cuptiActivityFlushAll: " + result_name(flushed != CUPTI_SUCCESS ? flushed : flushed_again);
  } else if (disabled != CUPTI_SUCCESS) {
    result_.available = false;
    result_.unavailable = "cuptiActivityDisable(CUPTI_ACTIVITY_KIND_UNIFIED_MEMORY_COUNTER): " + result_name(disabled);
  } else {
    sum_records(collected, result_);
  }
  return result_;
}

}  // namespace sdpa
