# kvfold::version: the project version and the git commit every binary prints for
# --version (common/version.h). The commit is read at build time by KvfoldGitCommit.cmake,
# which rewrites the generated source only when the commit changes: a new commit
# recompiles one small file and relinks the binaries, nothing else. Outside a git checkout
# (a tarball, a docker build context without .git) the commit is "unknown" unless
# -DKVFOLD_GIT_COMMIT=<hash> is given.
set(KVFOLD_GIT_COMMIT "" CACHE STRING "commit reported by --version when not building from a git checkout")
set(kvfold_version_cc ${CMAKE_BINARY_DIR}/generated/kvfold_version.cc)
add_custom_target(kvfold_git_commit
  COMMAND ${CMAKE_COMMAND} -DSOURCE_DIR=${PROJECT_SOURCE_DIR} -DOUTPUT=${kvfold_version_cc}
    -DVERSION=${PROJECT_VERSION} -DCOMMIT_OVERRIDE=${KVFOLD_GIT_COMMIT}
    -P ${PROJECT_SOURCE_DIR}/cmake/KvfoldGitCommit.cmake
  BYPRODUCTS ${kvfold_version_cc}
  VERBATIM)
add_library(kvfold_version STATIC ${kvfold_version_cc})
add_dependencies(kvfold_version kvfold_git_commit)
target_include_directories(kvfold_version PUBLIC ${PROJECT_SOURCE_DIR})
kvfold_target_options(kvfold_version)
add_library(kvfold::version ALIAS kvfold_version)
