// embedded_sources.h: the reproducer's template and the harness headers it inlines, as their
// text at build time (embed_sources.cmake writes the definition), so that `repro report` needs
// no source tree at run time.
#pragma once

#include <vector>

namespace sdpa {

struct EmbeddedSource {
  const char* path;  // relative to the source root, e.g. "math_sdpa/philox.h"
  const char* text;
};

const std::vector<EmbeddedSource>& embedded_sources();

}  // namespace sdpa
