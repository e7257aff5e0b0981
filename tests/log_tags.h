// log_tags.h: the tag sequence of a sdpa-debug-format stage log (docs/LOG_FORMAT.md), and the sequence
// documented there, so the CPU and GPU tests compare the harness's log with the same document.
#pragma once

#include <sstream>
#include <string>
#include <vector>

#include "run_program.h"

namespace test_util {

// "SDPA_DEBUG SDPA_ENTRY" for "[SDPA_DEBUG] [SDPA_ENTRY] ...", "CUDA_EVENT sdpa_entry" for
// "[CUDA_EVENT] sdpa_entry @ ..."; lines of neither shape are left out.
inline std::vector<std::string> debug_tags(const std::string& log) {
  std::vector<std::string> tags;
  std::istringstream in(log);
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("[CUDA_EVENT] ", 0) == 0) {
      tags.push_back("CUDA_EVENT " + line.substr(13, line.find(' ', 13) - 13));
      continue;
    }
    if (line.size() < 4 || line[0] != '[') continue;
    const size_t channel_end = line.find("] [");
    if (channel_end == std::string::npos) continue;
    const size_t tag_end = line.find(']', channel_end + 3);
    tags.push_back(line.substr(1, channel_end - 1) + " " + line.substr(channel_end + 3, tag_end - channel_end - 3));
  }
  return tags;
}

// The tags of one call: from the first SDPA_ENTRY to the first math_sdpa_complete.
inline std::vector<std::string> call_tags(const std::vector<std::string>& tags) {
  std::vector<std::string> call;
  bool in_call = false;
  for (const auto& t : tags) {
    if (t == "SDPA_DEBUG SDPA_ENTRY" && !in_call) in_call = true;
    if (!in_call) continue;
    call.push_back(t);
    if (t == "CUDA_EVENT math_sdpa_complete") break;
  }
  return call;
}

// The block `<!-- call-tags:NAME -->` ... `<!-- end -->` of docs/LOG_FORMAT.md, one tag a line.
inline std::vector<std::string> documented_call_tags(const std::string& name) {
  const std::string doc = file_text(std::string(SDPA_SOURCE_DIR) + "/docs/LOG_FORMAT.md");
  const std::string open = "<!-- call-tags:" + name + " -->";
  const size_t begin = doc.find(open), end = doc.find("<!-- end -->", begin);
  std::vector<std::string> tags;
  if (begin == std::string::npos || end == std::string::npos) return tags;
  std::istringstream in(doc.substr(begin + open.size(), end - begin - open.size()));
  std::string line;
  while (std::getline(in, line)) {
    const size_t first = line.find_first_not_of(' ');
    if (first != std::string::npos) tags.push_back(line.substr(first));
  }
  return tags;
}

}  // namespace test_util
