// Bearer-token auth, tenant isolation and TLS/mTLS through the real server.
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <thread>

#include "tests/memory_svc/server_fixture.h"

namespace kvfold::memory_svc::testing {
namespace {

using Code = absl::StatusCode;

class AuthTest : public ServerFixture {
 protected:
  void SetUp() override {
    config_.tokens_file = WriteFile("tokens", "# token tenant\ntok-alice alice\n"
                                              "tok-alice-2 alice\ntok-bob bob\n");
    StartServer();
  }
};

TEST_F(AuthTest, EveryCallNeedsAKnownToken) {
  const TestBlock b = MakeBlock(1);
  for (const std::string& token : {std::string(), std::string("tok-mallory")}) {
    StoreClient client = Client(token);
    EXPECT_EQ(client.Put("s", 0, b.header, b.payload).status().code(), Code::kUnauthenticated);
    EXPECT_EQ(client.Get("s").status().code(), Code::kUnauthenticated);
    EXPECT_EQ(client.GetSessionInfo("s").status().code(), Code::kUnauthenticated);
    EXPECT_EQ(client.ListVersions("s").status().code(), Code::kUnauthenticated);
    EXPECT_EQ(client.SetHead("s", 1).status().code(), Code::kUnauthenticated);
    EXPECT_EQ(client.PinVersion("s", 1, true).status().code(), Code::kUnauthenticated);
    EXPECT_EQ(client.Fork("s", 0, "t").status().code(), Code::kUnauthenticated);
    EXPECT_EQ(client.Delete("s").status().code(), Code::kUnauthenticated);
    EXPECT_EQ(client.ListSessions().status().code(), Code::kUnauthenticated);
  }
  // A malformed header ("Basic ...") is rejected too.
  auto stub = v1::MemoryStore::NewStub(Channel());
  grpc::ClientContext context;
  context.AddMetadata("authorization", "Basic tok-alice");
  v1::SessionInfo info;
  v1::GetSessionInfoRequest request;
  request.set_session_id("s");
  EXPECT_EQ(stub->GetSessionInfo(&context, request, &info).error_code(),
            grpc::StatusCode::UNAUTHENTICATED);
}

TEST_F(AuthTest, TenantsCannotSeeEachOther) {
  StoreClient alice = Client("tok-alice"), alice2 = Client("tok-alice-2"), bob = Client("tok-bob");
  const TestBlock a1 = MakeBlock(1), a2 = MakeBlock(2), b1 = MakeBlock(3);
  ASSERT_TRUE(alice.Put("secret", 0, a1.header, a1.payload).ok());
  ASSERT_TRUE(alice2.Put("secret", 1, a2.header, a2.payload).ok());  // same tenant, 2nd token
  EXPECT_EQ(bob.Get("secret").status().code(), Code::kNotFound);
  EXPECT_EQ(bob.Get("secret", 1).status().code(), Code::kNotFound);
  EXPECT_EQ(bob.GetSessionInfo("secret").status().code(), Code::kNotFound);
  EXPECT_EQ(bob.ListVersions("secret").status().code(), Code::kNotFound);
  EXPECT_EQ(bob.SetHead("secret", 1).status().code(), Code::kNotFound);
  EXPECT_EQ(bob.PinVersion("secret", 1, true).status().code(), Code::kNotFound);
  EXPECT_EQ(bob.Fork("secret", 0, "mine").status().code(), Code::kNotFound);
  EXPECT_EQ(bob.Delete("secret").status().code(), Code::kNotFound);
  EXPECT_EQ(bob.Put("secret", 2, b1.header, b1.payload).status().code(), Code::kNotFound);
  EXPECT_EQ(bob.ListSessions()->sessions_size(), 0);
  // Bob's "secret" is a different session altogether.
  absl::StatusOr<v1::PutBlockResponse> own = bob.Put("secret", 0, b1.header, b1.payload);
  ASSERT_TRUE(own.ok()) << own.status();
  EXPECT_EQ(own->version(), 1u);
  ASSERT_TRUE(bob.Fork("secret", 0, "bob-fork").ok());
  EXPECT_EQ(bob.Get("bob-fork")->payload, b1.payload);
  EXPECT_EQ(alice.Get("bob-fork").status().code(), Code::kNotFound);
  ASSERT_TRUE(bob.Delete("secret").ok());
  absl::StatusOr<StoreBlock> still = alice.Get("secret");
  ASSERT_TRUE(still.ok()) << still.status();
  EXPECT_EQ(still->payload, a2.payload);
  EXPECT_EQ(still->info.version(), 2u);
  absl::StatusOr<v1::StoreListSessionsResponse> alice_list = alice.ListSessions();
  ASSERT_EQ(alice_list->sessions_size(), 1);
  EXPECT_EQ(alice_list->sessions(0).session_id(), "secret");
  absl::StatusOr<v1::StoreListSessionsResponse> bob_list = bob.ListSessions();
  ASSERT_EQ(bob_list->sessions_size(), 1);
  EXPECT_EQ(bob_list->sessions(0).session_id(), "bob-fork");
}

TEST(AuthConfigTest, BadTokensFileFailsToStart) {
  TempDir dir;
  ServerConfig config;
  config.listen = "127.0.0.1:0";
  config.store.db_dir = dir.path() + "/db";
  config.tokens_file = dir.path() + "/missing";
  EXPECT_EQ(MemoryServer::Start(config).status().code(), Code::kNotFound);
  std::ofstream(dir.path() + "/bad") << "only-one-field\n";
  config.tokens_file = dir.path() + "/bad";
  EXPECT_EQ(MemoryServer::Start(config).status().code(), Code::kInvalidArgument);
}

// A token added to the file while the server runs is accepted once the watcher saw the
// change, and a removed one is refused; ReloadAuth() (SIGHUP) does the same at once.
TEST_F(AuthTest, TokensFileIsReloadedWhileServing) {
  server_.reset();
  config_.tokens_watch_period = absl::Milliseconds(20);
  StartServer();
  const TestBlock b = MakeBlock(5);
  EXPECT_EQ(Client("tok-carol").ListSessions().status().code(), Code::kUnauthenticated);
  WriteFile("tokens", "tok-alice alice\ntok-carol carol\n");
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (!Client("tok-carol").ListSessions().ok() && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  EXPECT_TRUE(Client("tok-carol").Put("c", 0, b.header, b.payload).ok());
  EXPECT_EQ(Client("tok-bob").ListSessions().status().code(), Code::kUnauthenticated);
  // A broken file leaves the tokens in force.
  WriteFile("tokens", "broken-line\n");
  EXPECT_EQ(server_->ReloadAuth().code(), Code::kInvalidArgument);
  EXPECT_TRUE(Client("tok-carol").GetSessionInfo("c").ok());
  WriteFile("tokens", "tok-bob bob\n");
  EXPECT_TRUE(server_->ReloadAuth().ok());
  EXPECT_EQ(Client("tok-carol").GetSessionInfo("c").status().code(), Code::kUnauthenticated);
  EXPECT_TRUE(Client("tok-bob").ListSessions().ok());
}

std::string ReadAll(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// Self-signed certificates made with the openssl CLI (skipped when it is missing).
class TlsTest : public ServerFixture {
 protected:
  void SetUp() override {
    if (std::system("command -v openssl > /dev/null 2>&1") != 0) {
      GTEST_SKIP() << "openssl CLI not found";
    }
    const std::string d = dir_.path();
    for (const std::string name : {"server", "client"}) {
      const std::string cmd =
          "openssl req -x509 -newkey rsa:2048 -nodes -days 2 -subj /CN=" + name +
          " -addext subjectAltName=IP:127.0.0.1,DNS:localhost -keyout " + d + "/" + name +
          ".key -out " + d + "/" + name + ".crt > /dev/null 2>&1";
      ASSERT_EQ(std::system(cmd.c_str()), 0) << cmd;
    }
    config_.tls_cert_file = d + "/server.crt";
    config_.tls_key_file = d + "/server.key";
    config_.tls_client_ca_file = d + "/client.crt";  // the client cert is its own CA
    StartServer();
  }

  std::shared_ptr<grpc::Channel> TlsChannel(bool with_client_cert) {
    grpc::SslCredentialsOptions options;
    options.pem_root_certs = ReadAll(dir_.path() + "/server.crt");
    if (with_client_cert) {
      options.pem_private_key = ReadAll(dir_.path() + "/client.key");
      options.pem_cert_chain = ReadAll(dir_.path() + "/client.crt");
    }
    return grpc::CreateChannel(server_->address(), grpc::SslCredentials(options));
  }
};

TEST_F(TlsTest, MutualTlsRequiresAClientCertificate) {
  const TestBlock b = MakeBlock(4);
  StoreClient good(TlsChannel(true));
  absl::StatusOr<v1::PutBlockResponse> put = good.Put("tls", 0, b.header, b.payload);
  ASSERT_TRUE(put.ok()) << put.status();
  EXPECT_EQ(good.Get("tls")->payload, b.payload);
  StoreClient no_cert(TlsChannel(false));
  EXPECT_EQ(no_cert.GetSessionInfo("tls").status().code(), Code::kUnavailable);
  StoreClient plaintext(Channel());
  EXPECT_EQ(plaintext.GetSessionInfo("tls").status().code(), Code::kUnavailable);
}

}  // namespace
}  // namespace kvfold::memory_svc::testing
