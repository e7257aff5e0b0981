// json_schema_check.h: a validator for the subset of JSON Schema (draft 2020-12) that
// results/sweep.schema.json uses, so the tests can check real output against the committed
// schema. nlohmann/json has no validator, and the distribution has none we can depend on.
//
// Keywords: type (a name or a list), required, properties, additionalProperties (false or a
// schema), items (one schema for every element), enum, minimum, $ref to "#" or
// "#/$defs/NAME", and $defs. Annotations ($schema, $id, title, description, $comment) are
// ignored. Any other keyword throws std::invalid_argument, so the schema cannot quietly rely on
// a rule that nobody checks.
#pragma once

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace sdpa_test {

// The ways `instance` breaks the schema at `pointer` inside `root` ("" is the root itself,
// "#/$defs/cell" a definition), one line each as "<path in the instance>: <what>"; empty when
// it conforms.
std::vector<std::string> schema_errors(const nlohmann::json& root, const nlohmann::json& instance,
                                       const std::string& pointer = "");

}  // namespace sdpa_test
