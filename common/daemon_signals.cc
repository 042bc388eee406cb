#include "common/daemon_signals.h"

#include <pthread.h>

namespace kvfold {

DaemonSignals::DaemonSignals() {
  sigemptyset(&signals_);
  sigaddset(&signals_, SIGTERM);
  sigaddset(&signals_, SIGINT);
  sigaddset(&signals_, SIGHUP);
  pthread_sigmask(SIG_BLOCK, &signals_, nullptr);
}

int DaemonSignals::WaitForStop(const std::function<void()>& on_reload) const {
  while (true) {
    int signal_number = 0;
    if (sigwait(&signals_, &signal_number) != 0) return -1;
    if (signal_number != SIGHUP) return signal_number;
    on_reload();
  }
}

}  // namespace kvfold
