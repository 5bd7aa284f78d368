// Reading and writing graphs: binary protobuf (.pb) or text format (.pbtxt), chosen by
// the file extension. Errors name the file. Writes go to a temporary file first and are
// renamed into place, so a failed write never leaves a half-written graph.
#pragma once

#include <string>

#include "runtime/graph/graph.h"

namespace ds {

// Loads and converts; does not validate (see ValidateGraph).
StatusOr<Graph> LoadGraph(const std::string& path);
// Parses text-format graph content; `source` names it in errors.
StatusOr<Graph> ParseGraphText(const std::string& text, const std::string& source);
Status SaveGraph(const Graph& graph, const std::string& path);

}  // namespace ds
