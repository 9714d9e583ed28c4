// docs/api.md's Config table, generated from the list of GEEPS_* variables
// (common/tunables.h) and the guide's meaning of each Config field.
// Header-only dependencies, as tunables.h: geeps_launch compiles it too.
#ifndef GEEPS_COMMON_CONFIG_DOC_H_
#define GEEPS_COMMON_CONFIG_DOC_H_

#include <string>
#include <string_view>

namespace geeps::tunables {

// The guide's meaning of `field` ("Config::num_workers"), or null.
const char* ConfigMeaning(std::string_view field);
// docs/api.md's table (between its "config-table" markers): one row per
// Config row of the list, in its order.
std::string ConfigMarkdownTable();

}  // namespace geeps::tunables

#endif  // GEEPS_COMMON_CONFIG_DOC_H_
