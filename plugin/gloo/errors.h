// Exceptions inside the Gloo island and their translation into dlpg statuses. Nothing here
// leaves the island: every extern "C" entry point catches and calls dlpg__gloo_status().
#pragma once

#include <stdexcept>
#include <string>

#include "gloo/c_headers.h"

namespace dlpg_gloo {

// A dlpg call made from inside Gloo (a store adapter callback) failed. Carries the dlpg
// status and message across Gloo's frames so that the entry point can restore them.
class StatusError : public std::runtime_error {
 public:
  StatusError(dlpg_status_t status, const std::string &msg)
      : std::runtime_error(msg), status_(status) {}
  dlpg_status_t status() const { return status_; }

 private:
  dlpg_status_t status_;
};

// Throw StatusError with the calling thread's last dlpg message when st is not OK.
void throw_if_failed(dlpg_status_t st, const char *what);

// Classify Gloo's exception text: timeouts -> TIMEOUT, a peer that closed or reset its
// connection -> REMOTE, everything else -> SYSTEM.
dlpg_status_t classify_gloo_message(const std::string &msg);

// Classify the exception being handled (call only inside a catch block): its status and
// its text, without recording anything.
dlpg_status_t classify_current_exception(std::string *text);

// Turn the exception being handled (call only inside a catch block) into a status and a
// dlpg__error message "fn: <text>". aborted turns any failure into DLPG_ERR_ABORTED.
dlpg_status_t status_from_current_exception(const char *fn, bool aborted = false);

}  // namespace dlpg_gloo
