// json_schema_check.h: a validator for the subset of JSON Schema (draft 2020-12) that
// results/*.schema.json use, so the tests can check real output against the committed
// schemas. nlohmann/json has no validator, and the distribution has none we can depend on.
//
// Keywords: type (a name or a list), required, properties, additionalProperties (false or a
// schema), items (one schema for every element), minItems, maxItems, enum, minimum, anyOf,
// $ref and $defs. A $ref is "#", "#/$defs/NAME", or another schema of the same folder by file
// name, whole or one of its definitions ("run.schema.json", "run.schema.json#/$defs/device"):
// the run, bench and report schemas share the run's definitions that way. Annotations
// ($schema, $id, title, description, $comment) are ignored. Any other keyword throws
// std::invalid_argument, so a schema cannot quietly rely on a rule that nobody checks.
#pragma once

#include <map>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace sdpa_test {

// The ways `instance` breaks the schema at `pointer` inside `root` ("" is the root itself,
// "#/$defs/cell" a definition), one line each as "<path in the instance>: <what>"; empty when
// it conforms. A $ref to another file throws.
std::vector<std::string> schema_errors(const nlohmann::json& root, const nlohmann::json& instance,
                                       const std::string& pointer = "");

// Schemas that refer to one another by file name: each file's name (no folder) and document.
using SchemaFiles = std::map<std::string, nlohmann::json>;

// Every *.schema.json in `folder`, by file name.
SchemaFiles load_schema_files(const std::string& folder);

// As above, for the schema `file` of `files` (or its definition at `pointer`).
std::vector<std::string> schema_errors(const SchemaFiles& files, const std::string& file, const nlohmann::json& instance,
                                       const std::string& pointer = "");

}  // namespace sdpa_test
