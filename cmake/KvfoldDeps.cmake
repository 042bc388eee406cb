# All dependencies come from Debian 12 packages (scripts/setup.sh installs them).
find_package(Threads REQUIRED)
find_package(PkgConfig REQUIRED)
find_package(absl CONFIG REQUIRED)
find_package(Protobuf REQUIRED)
find_package(gRPC CONFIG REQUIRED)
find_package(RocksDB CONFIG REQUIRED)
find_package(GTest CONFIG REQUIRED)
find_package(OpenSSL REQUIRED)            # SHA-256 for model fingerprints
find_package(CLI11 CONFIG REQUIRED)       # every binary's command line (docs/cli.md)
find_package(nlohmann_json 3 REQUIRED)    # config.json, tokenizer.json, safetensors headers
pkg_check_modules(XXHASH REQUIRED IMPORTED_TARGET libxxhash)          # XXH3 block checksums
pkg_check_modules(SENTENCEPIECE REQUIRED IMPORTED_TARGET sentencepiece)
pkg_check_modules(OPENBLAS IMPORTED_TARGET openblas)                  # optional GEMM baseline

find_program(KVFOLD_GRPC_CPP_PLUGIN grpc_cpp_plugin REQUIRED)
