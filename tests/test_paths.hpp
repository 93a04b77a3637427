// The source folder and the shardsim binary of this build, as absolute paths (their values are
// in the generated test_paths.cpp; tests/CMakeLists.txt). Test files spell them SHARDSIM_SOURCE_DIR
// and SHARDSIM_BINARY, which the build defines as these names.
#pragma once

extern const char* const shardsim_test_source_dir;
extern const char* const shardsim_test_binary;
