// The signals a kvfold daemon (kvfold-inference, kvfold-memory) acts on: SIGTERM and
// SIGINT stop it (each daemon then drains: docs/observability.md "Drain on SIGTERM",
// docs/memory-store.md), SIGHUP reloads what it reads from files (its tokens file).
#ifndef KVFOLD_COMMON_DAEMON_SIGNALS_H_
#define KVFOLD_COMMON_DAEMON_SIGNALS_H_

#include <signal.h>

#include <functional>

namespace kvfold {

class DaemonSignals {
 public:
  // Blocks SIGTERM, SIGINT and SIGHUP in the calling thread. Threads inherit the mask of
  // the thread that starts them, so constructed in main() before any thread starts, no
  // thread of the process takes these signals: only WaitForStop() receives them, in
  // order, instead of the default action killing the process mid-call. They stay blocked
  // until the process exits (destruction included): a second SIGTERM during the drain
  // stays pending and never cuts the drain short.
  DaemonSignals();
  DaemonSignals(const DaemonSignals&) = delete;
  DaemonSignals& operator=(const DaemonSignals&) = delete;

  // Waits until SIGTERM or SIGINT arrives and returns its number; each SIGHUP before it
  // calls on_reload() (on this thread) and the wait goes on. Returns -1 if sigwait fails.
  int WaitForStop(const std::function<void()>& on_reload) const;

 private:
  sigset_t signals_;
};

}  // namespace kvfold

#endif  // KVFOLD_COMMON_DAEMON_SIGNALS_H_
