// StopMatcher: OpenAI `stop` strings on streamed text. Text that might be the start of a
// stop string is held back until it is known not to be; a stop string found is never
// emitted, nor anything after it.
#ifndef KVFOLD_INFERENCE_SVC_HTTP_STOP_MATCHER_H_
#define KVFOLD_INFERENCE_SVC_HTTP_STOP_MATCHER_H_

#include <string>
#include <vector>

namespace kvfold::http {

class StopMatcher {
 public:
  explicit StopMatcher(std::vector<std::string> stops) : stops_(std::move(stops)) {}

  // Appends `text`; returns what may be shown now. After a stop string was found
  // (stopped() true) returns "" forever.
  std::string Push(const std::string& text);
  // The held-back rest (the turn ended without a stop string).
  std::string Flush();
  bool stopped() const { return stopped_; }

 private:
  std::vector<std::string> stops_;
  std::string held_;
  bool stopped_ = false;
};

}  // namespace kvfold::http

#endif  // KVFOLD_INFERENCE_SVC_HTTP_STOP_MATCHER_H_
