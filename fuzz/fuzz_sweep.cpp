// fuzz_sweep.cpp: the sweep's readers of files a user hands it, the matrix file (--matrix) and
// the JSON-lines file a resumed sweep continues (--resume). The first byte picks which (even:
// matrix, odd: JSON lines); the rest is the file. Any bytes must either parse or be rejected
// with an InputError. What parses must then go on without any other exception, as in a sweep:
// a matrix expands to its cells (at most kMaxSweepCells), and the records a resume keeps go
// through the table, the footer, the final document and the SVG.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <vector>

#include "math_sdpa/errors.h"
#include "repro/sweep/matrix.h"
#include "repro/sweep/sweep_output.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const std::string text(reinterpret_cast<const char*>(data) + 1, size - 1);
  try {
    if (data[0] % 2 == 0) {
      const std::vector<sdpa::SweepCell> cells = sdpa::expand_matrix(sdpa::parse_matrix(text, "fuzz.json"));
      if (cells.empty() || cells.size() > static_cast<size_t>(sdpa::kMaxSweepCells)) std::abort();
    } else {
      const sdpa::JsonlContents read = sdpa::parse_jsonl(text, "fuzz.jsonl");
      sdpa::SweepMeta meta;
      const size_t planned = read.records.size() + 1;
      sdpa::sweep_table(read.records, planned, false);
      sdpa::sweep_footer(read.records, planned, false);
      sdpa::SweepEnd end;
      end.cells_planned = planned;
      sdpa::sweep_document(meta, read.records, end).dump();
      sdpa::latest_records(read.records);
      sdpa::sweep_svg(read.records, "fuzz", sdpa::machine_description(nullptr, read.records));
    }
  } catch (const sdpa::InputError&) {
  }
  return 0;
}
