# dependencies.cmake: the third-party headers, from the distribution (libcli11-dev,
# nlohmann-json3-dev, doctest-dev). Their CMake config files may be missing (the GPU machine
# has only the headers), so fall back to the headers themselves.
function(sdpa_header_dependency target config_package header)
  find_package(${config_package} CONFIG QUIET)
  if(NOT TARGET ${target})
    find_path(${config_package}_INCLUDE_DIR ${header} REQUIRED)
    add_library(${target} INTERFACE IMPORTED GLOBAL)
    target_include_directories(${target} INTERFACE ${${config_package}_INCLUDE_DIR})
  endif()
endfunction()
sdpa_header_dependency(CLI11::CLI11 CLI11 CLI/CLI.hpp)
sdpa_header_dependency(nlohmann_json::nlohmann_json nlohmann_json nlohmann/json.hpp)
sdpa_header_dependency(doctest::doctest doctest doctest/doctest.h)
