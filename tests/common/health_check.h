// grpc.health.v1.Health/Check for tests, through a generic stub (the health proto's C++
// header is not packaged): request = field 1 (service name, empty: the whole server),
// response = field 1 (status) as a varint. Returns 1 SERVING, 2 NOT_SERVING, 0 UNKNOWN, -1
// when the call failed (NOT_FOUND: a service the server does not report on).
#ifndef KVFOLD_TESTS_COMMON_HEALTH_CHECK_H_
#define KVFOLD_TESTS_COMMON_HEALTH_CHECK_H_

#include <grpcpp/create_channel.h>
#include <grpcpp/generic/generic_stub.h>

#include <chrono>
#include <condition_variable>
#include <mutex>
#include <string>
#include <vector>

namespace kvfold::testing {

constexpr int kHealthServing = 1;
constexpr int kHealthNotServing = 2;

inline int HealthCheck(const std::string& address, const std::string& service = "") {
  auto channel = grpc::CreateChannel(address, grpc::InsecureChannelCredentials());
  grpc::GenericStub stub(channel);
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(5));
  std::string request_bytes;
  if (!service.empty()) {  // names < 128 bytes: a one-byte length
    request_bytes = std::string("\x0a") + static_cast<char>(service.size()) + service;
  }
  grpc::Slice request_slice(request_bytes);
  grpc::ByteBuffer request(&request_slice, 1);
  grpc::ByteBuffer response;
  std::mutex mu;
  std::condition_variable cv;
  bool done = false;
  grpc::Status status;
  stub.UnaryCall(&context, "/grpc.health.v1.Health/Check", grpc::StubOptions(), &request, &response,
                 [&](grpc::Status s) {
                   std::lock_guard<std::mutex> lock(mu);
                   status = s;
                   done = true;
                   cv.notify_all();
                 });
  std::unique_lock<std::mutex> lock(mu);
  cv.wait(lock, [&] { return done; });
  if (!status.ok()) return -1;
  std::vector<grpc::Slice> slices;
  (void)response.Dump(&slices);
  std::string bytes;
  for (const auto& slice : slices) {
    bytes.append(reinterpret_cast<const char*>(slice.begin()), slice.size());
  }
  if (bytes.empty()) return 0;
  return bytes.size() >= 2 && bytes[0] == 0x08 ? bytes[1] : -1;
}

}  // namespace kvfold::testing

#endif  // KVFOLD_TESTS_COMMON_HEALTH_CHECK_H_
