// libFuzzer target (KVFOLD_FUZZ=ON with clang), or with fuzz_driver.cc a corpus runner.
#include "tests/inference_svc/model/fuzz/parsers_fuzz.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  kvfold::fuzz::FuzzGguf(data, size);
  return 0;
}
