# kvfold_target_options(<target>): warnings (and -Werror in CI) for project code only;
# generated protobuf code and third-party headers are left alone.
function(kvfold_target_options target)
  target_compile_options(${target} PRIVATE
    $<$<COMPILE_LANGUAGE:CXX>:-Wall -Wextra -Wno-unused-parameter>)
  if(KVFOLD_WERROR)
    target_compile_options(${target} PRIVATE $<$<COMPILE_LANGUAGE:CXX>:-Werror>)
  endif()
endfunction()

if(KVFOLD_SANITIZE)
  add_compile_options(-fsanitize=address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=undefined)
  add_link_options(-fsanitize=address,undefined)
endif()

# kvfold_add_test(NAME <name> SOURCES <srcs...> LIBS <libs...> LABELS <labels...>
#                 [TIMEOUT <s>]): a GoogleTest binary registered with CTest (one CTest
# entry per binary keeps CI output short; gtest prints the per-case results). Its main()
# (tests/testing/gtest_main.cc) exits 77 when every selected test skipped itself, which
# CTest reports as skipped. Labels follow docs/testing.md.
function(kvfold_add_test)
  cmake_parse_arguments(T "" "NAME;TIMEOUT" "SOURCES;LIBS;LABELS" ${ARGN})
  add_executable(${T_NAME} ${T_SOURCES})
  target_include_directories(${T_NAME} PRIVATE ${PROJECT_SOURCE_DIR})
  target_link_libraries(${T_NAME} PRIVATE ${T_LIBS} kvfold::testing_main GTest::gtest GTest::gmock)
  kvfold_target_options(${T_NAME})
  add_test(NAME ${T_NAME} COMMAND ${T_NAME})
  if(NOT T_TIMEOUT)
    set(T_TIMEOUT 300)
  endif()
  set_tests_properties(${T_NAME} PROPERTIES LABELS "${T_LABELS}" TIMEOUT ${T_TIMEOUT}
    SKIP_RETURN_CODE 77 ENVIRONMENT "KVFOLD_SOURCE_DIR=${PROJECT_SOURCE_DIR}")
endfunction()

# kvfold_test_runs_servers(<target>): the test starts the real kvfold-memory and
# kvfold-inference binaries (and make_random_projector): their paths as compile definitions,
# built before the test.
function(kvfold_test_runs_servers target)
  target_compile_definitions(${target} PRIVATE
    KVFOLD_MEMORY_BIN="$<TARGET_FILE:kvfold-memory>"
    KVFOLD_INFERENCE_BIN="$<TARGET_FILE:kvfold-inference>"
    KVFOLD_MAKE_RANDOM_PROJECTOR_BIN="$<TARGET_FILE:make_random_projector>"
    KVFOLD_SOURCE_DIR_FALLBACK="${PROJECT_SOURCE_DIR}")
  add_dependencies(${target} kvfold-memory kvfold-inference make_random_projector)
endfunction()
