// path_settings.cpp: names, parsers and the stage plan of PathSettings.
#include "path_settings.h"

#include <algorithm>
#include <sstream>
#include <stdexcept>
#include <utility>

#include "context.h"
#include "errors.h"
#include "name_table.h"

namespace sdpa {

namespace {

const NameTable<StreamMode> kStreamModes{
    "--stream", {{StreamMode::legacy, "legacy"}, {StreamMode::non_blocking, "non-blocking"}, {StreamMode::per_thread, "per-thread"}}};
const NameTable<GemmStream> kGemmStreams{"--gemm-stream",
                                         {{GemmStream::same, "same"},
                                          {GemmStream::legacy, "legacy"},
                                          {GemmStream::aux, "aux"},
                                          {GemmStream::blocking, "blocking"}}};
const NameTable<GemmOrder> kGemmOrders{"--gemm-order", {{GemmOrder::event, "event"}, {GemmOrder::none, "none"}}};
const NameTable<KLayout> kKLayouts{"--k-layout", {{KLayout::bhse, "bhse"}, {KLayout::bshe, "bshe"}}};
const NameTable<GemmApi> kGemmApis{"--gemm-api", {{GemmApi::strided, "strided"}, {GemmApi::batched, "batched"}}};
const NameTable<ScoresToHost> kScoresToHost{"--scores-to-host",
                                        {{ScoresToHost::none, "none"},
                                         {ScoresToHost::read, "read"},
                                         {ScoresToHost::advise, "advise"},
                                         {ScoresToHost::both, "both"}}};
const NameTable<ScoresHostPhase> kScoresHostPhases{
    "--scores-host-phase", {{ScoresHostPhase::before, "before"}, {ScoresHostPhase::during, "during"}}};
const NameTable<AllocKind> kAllocKinds{"--alloc",
                                   {{AllocKind::managed, "managed"},
                                    {AllocKind::device, "device"},
                                    {AllocKind::async, "async"},
                                    {AllocKind::host, "host"},
                                    {AllocKind::system, "system"},
                                    {AllocKind::vmm, "vmm"}}};
const NameTable<AllocTiming> kAllocTimings{"--alloc-timing",
                                           {{AllocTiming::upfront, "upfront"}, {AllocTiming::per_call, "per-call"}}};
const NameTable<Retain> kRetains{"--retain", {{Retain::none, "none"}, {Retain::autograd, "autograd"}, {Retain::checkpoint, "checkpoint"}}};
const NameTable<AsyncPool> kAsyncPools{"--async-pool", {{AsyncPool::private_pool, "private"}, {AsyncPool::stream, "stream"}}};
const NameTable<Advice> kAdvice{"--advise",
                            {{Advice::preferred_gpu, "preferred:gpu"},
                             {Advice::preferred_cpu, "preferred:cpu"},
                             {Advice::accessed_by_gpu, "accessed-by:gpu"},
                             {Advice::accessed_by_cpu, "accessed-by:cpu"},
                             {Advice::read_mostly, "read-mostly"}}};
const NameTable<WeightsIo> kWeightsIo{"weights io", {{WeightsIo::mapped, "mapped"}, {WeightsIo::direct, "direct"}}};
const NameTable<WeightsMapping> kWeightsMappings{"--weights-mapping",
                                                {{WeightsMapping::unmap, "unmap"}, {WeightsMapping::keep, "keep"}}};
const NameTable<ResultTensor> kResultTensors{
    "result tensor", {{ResultTensor::scores, "scores"}, {ResultTensor::probs, "probs"}, {ResultTensor::output, "output"}}};

}  // namespace

const char* stream_mode_name(StreamMode m) { return kStreamModes.name(m); }
const char* weights_io_name(WeightsIo w) { return kWeightsIo.name(w); }
const char* weights_mapping_name(WeightsMapping m) { return kWeightsMappings.name(m); }
WeightsMapping parse_weights_mapping(const std::string& s) { return kWeightsMappings.parse(s); }

MappedWeights parse_mapped_weights(const std::string& text) {
  MappedWeights w;
  const size_t colon = text.find(':');
  const std::string size = text.substr(0, colon);
  if (size.empty() || size.find_first_not_of("0123456789.") == std::string::npos) {
    throw InputError("--mapped-weights: '" + text.substr(0, 60) + "' is not SIZE[:FILE] with a unit (e.g. 30G, 41GB)");
  }
  w.bytes = parse_size(size, "--mapped-weights");
  if (colon != std::string::npos) {
    w.file = text.substr(colon + 1);
    if (w.file.empty()) throw InputError("--mapped-weights: '" + text.substr(0, 60) + "' names no file after the ':'");
  }
  return w;
}
const char* gemm_stream_name(GemmStream g) { return kGemmStreams.name(g); }
bool implicitly_ordered_by_legacy_stream(StreamMode path, GemmStream gemm) {
  switch (gemm) {
    case GemmStream::blocking: return path == StreamMode::legacy;
    case GemmStream::legacy: return path == StreamMode::per_thread;
    case GemmStream::same:
    case GemmStream::aux: return false;
  }
  return false;
}

const char* gemm_order_name(GemmOrder o) { return kGemmOrders.name(o); }
const char* k_layout_name(KLayout k) { return kKLayouts.name(k); }
const char* gemm_api_name(GemmApi a) { return kGemmApis.name(a); }
const char* scores_to_host_name(ScoresToHost s) { return kScoresToHost.name(s); }
const char* scores_host_phase_name(ScoresHostPhase p) { return kScoresHostPhases.name(p); }
const char* advice_name(Advice a) { return kAdvice.name(a); }
const char* alloc_kind_name(AllocKind k) { return kAllocKinds.name(k); }
const char* async_pool_name(AsyncPool p) { return kAsyncPools.name(p); }
const char* alloc_timing_name(AllocTiming t) { return kAllocTimings.name(t); }
const char* retain_name(Retain r) { return kRetains.name(r); }

StreamMode parse_stream_mode(const std::string& s) { return kStreamModes.parse(s); }
GemmStream parse_gemm_stream(const std::string& s) { return kGemmStreams.parse(s); }
GemmOrder parse_gemm_order(const std::string& s) { return kGemmOrders.parse(s); }
KLayout parse_k_layout(const std::string& s) { return kKLayouts.parse(s); }
GemmApi parse_gemm_api(const std::string& s) { return kGemmApis.parse(s); }
ScoresToHost parse_scores_to_host(const std::string& s) { return kScoresToHost.parse(s); }
ScoresHostPhase parse_scores_host_phase(const std::string& s) { return kScoresHostPhases.parse(s); }
AllocKind parse_alloc_kind(const std::string& s) { return kAllocKinds.parse(s); }
AllocTiming parse_alloc_timing(const std::string& s) { return kAllocTimings.parse(s); }
Retain parse_retain(const std::string& s) { return kRetains.parse(s); }

std::vector<Advice> parse_advice_list(const std::string& s) {
  std::vector<Advice> out;
  if (s.empty() || s == "none") return out;
  std::stringstream in(s);
  std::string item;
  while (std::getline(in, item, ',')) {
    const Advice a = kAdvice.parse(item);
    for (Advice seen : out) {
      if (seen == a) throw InputError("--advise: '" + item + "' given twice");
    }
    out.push_back(a);
  }
  if (s.back() == ',') throw InputError("--advise: empty item in '" + s + "'");
  return out;
}

std::string path_setting_choices(const std::string& option) {
  for (const auto& [what, words] : {std::pair{kStreamModes.what, kStreamModes.accepted()},
                                    {kGemmStreams.what, kGemmStreams.accepted()},
                                    {kGemmOrders.what, kGemmOrders.accepted()},
                                    {kKLayouts.what, kKLayouts.accepted()},
                                    {kGemmApis.what, kGemmApis.accepted()},
                                    {kScoresToHost.what, kScoresToHost.accepted()},
                                    {kScoresHostPhases.what, kScoresHostPhases.accepted()},
                                    {kAllocKinds.what, kAllocKinds.accepted()},
                                    {kAllocTimings.what, kAllocTimings.accepted()},
                                    {kRetains.what, kRetains.accepted()},
                                    {kAdvice.what, kAdvice.accepted()}}) {
    if (option == what) return words;
  }
  throw std::logic_error("path_setting_choices: no setting has the option " + option);
}

std::string advice_list_string(const std::vector<Advice>& a) {
  if (a.empty()) return "none";
  std::string s;
  for (Advice x : a) s += (s.empty() ? "" : ",") + std::string(advice_name(x));
  return s;
}

AllocatorOptions allocator_options(const PathSettings& s, bool allow_oversubscription) {
  AllocatorOptions o;
  o.allow_oversubscription = allow_oversubscription;
  o.async_pool = s.async_pool;
  o.caching = s.alloc_timing == AllocTiming::per_call;
  return o;
}

std::map<std::string, std::string> settings_fields(const PathSettings& s) {
  return {{"alloc", alloc_kind_name(s.alloc)},
          {"async_pool", async_pool_name(s.async_pool)},
          {"stream", stream_mode_name(s.stream)},
          {"qk_gemm_stream", gemm_stream_name(s.qk_gemm_stream)},
          {"qk_gemm_order", gemm_order_name(s.qk_gemm_order)},
          {"k_layout", k_layout_name(s.k_layout)},
          {"qk_gemm_api", gemm_api_name(s.qk_gemm_api)},
          {"kt_contiguous", s.kt_contiguous ? "on" : "off"},
          {"scores_to_host", scores_to_host_name(s.scores_to_host)},
          {"scores_host_phase", scores_host_phase_name(s.scores_host_phase)},
          {"entry_touch_streams", std::to_string(s.entry_touch_streams)},
          {"entry_host_touch", s.entry_host_touch ? "on" : "off"},
          {"advise", advice_list_string(s.advice)},
          {"last_stage", stage_name(s.last_stage)},
          {"graph", s.graph ? "on" : "off"},
          {"alloc_timing", alloc_timing_name(s.alloc_timing)},
          {"layers", std::to_string(s.layers)},
          {"retain", retain_name(s.retain)},
          {"chunk_bytes", std::to_string(s.chunk_bytes)},
          {"backward", s.backward ? "true" : "false"},
          {"reduced_on_device", s.reduced_on_device ? "on" : "off"},
          {"mapped_weights", std::to_string(s.weights.bytes)},
          {"weights_io", weights_io_name(s.weights.io)},
          {"weights_pages", s.weights.drop_pages ? "drop" : "keep"},
          {"weights_mapping", weights_mapping_name(s.weights.mapping)},
          {"plan_against", s.plan_against_free ? "free" : "available"}};
}

bool kt_copy_needed(const SdpaProblem& p, const PathSettings& ps) {
  if (ps.kt_contiguous) return true;
  if (ps.qk_gemm_api == GemmApi::batched) return false;  // pointer arrays take any head offsets
  // After gqa_expand K is a fresh contiguous [B, Hq, S, E]; otherwise the layout decides.
  const bool bshe_view = ps.k_layout == KLayout::bshe && !p.gqa();
  return bshe_view && p.batch > 1 && p.kv_len > 1;
}

std::string graph_conflict(const PathSettings& ps) {
  if (ps.scores_to_host != ScoresToHost::none) {
    return "the host touches the scores between the GEMM and softmax (--scores-to-host), which a graph cannot hold";
  }
  if (ps.stream == StreamMode::legacy || ps.qk_gemm_stream == GemmStream::legacy) {
    return "the legacy default stream cannot be captured into a graph (--stream and --gemm-stream must not be legacy)";
  }
  if (ps.qk_gemm_stream != GemmStream::same && ps.qk_gemm_order == GemmOrder::none) {
    return "a GEMM stream ordered by nothing (--gemm-order none) never joins the capture";
  }
  return "";
}

int64_t chunk_rows(const SdpaProblem& p, const PathSettings& ps) {
  // Chunks are of a call that runs the whole path (the chunk part acts on nothing else).
  if (ps.chunk_bytes <= 0 || result_tensor_of(ps) != ResultTensor::output) return p.q_len;
  const int64_t row_bytes = p.batch * p.q_heads * p.kv_len * static_cast<int64_t>(dtype_size(p.compute_dtype()));
  const int64_t most = std::max<int64_t>(1, ps.chunk_bytes / row_bytes);
  // As few chunks as the budget allows, as even as they can be: 4608 rows at 606 a chunk at most
  // are 8 chunks of 576, not 7 of 606 and one of 366.
  const int64_t chunks = (p.q_len + most - 1) / most;
  return (p.q_len + chunks - 1) / chunks;
}

bool stage_observed(Stage s, const SdpaProblem& p, const PathSettings& ps) {
  return stage_runs(s, p, ps) && !(ps.graph && is_captured_stage(s));
}

ResultTensor result_tensor_of(const PathSettings& ps) {
  const int last = static_cast<int>(ps.last_stage);
  if (last < static_cast<int>(Stage::scores_to_host)) return ResultTensor::scores;
  if (last < static_cast<int>(Stage::pv_gemm)) return ResultTensor::probs;
  return ResultTensor::output;
}

const char* result_tensor_name(ResultTensor t) { return kResultTensors.name(t); }
const char* result_tensor_name(const PathSettings& ps) { return result_tensor_name(result_tensor_of(ps)); }

}  // namespace sdpa
