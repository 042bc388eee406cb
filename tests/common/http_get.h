// A blocking HTTP/1.1 GET on 127.0.0.1 for tests of the /metrics endpoints: the whole
// response (status line, headers, body) as the server sent it until it closed; "" when the
// connection failed.
#ifndef KVFOLD_TESTS_COMMON_HTTP_GET_H_
#define KVFOLD_TESTS_COMMON_HTTP_GET_H_

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <string>

#include "tests/testing/descriptors.h"

namespace kvfold::testing {

inline std::string HttpGet(int port, const std::string& path) {
  const int fd = ConnectLoopback(port);
  if (fd < 0) return "";
  const std::string request = "GET " + path + " HTTP/1.1\r\nHost: kvfold\r\n\r\n";
  ::send(fd, request.data(), request.size(), 0);
  std::string out;
  char buf[8192];
  ssize_t n;
  while ((n = ::recv(fd, buf, sizeof(buf), 0)) > 0) out.append(buf, static_cast<size_t>(n));
  ::close(fd);
  return out;
}

// The body of an HttpGet response ("" without one).
inline std::string HttpBody(const std::string& response) {
  const size_t at = response.find("\r\n\r\n");
  return at == std::string::npos ? "" : response.substr(at + 4);
}

}  // namespace kvfold::testing

#endif  // KVFOLD_TESTS_COMMON_HTTP_GET_H_
