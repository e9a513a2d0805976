// Translation of Gloo and island exceptions into dlpg statuses and messages.
#include "gloo/errors.h"

#include <exception>
#include <new>

#include <gloo/common/error.h>

namespace dlpg_gloo {

void throw_if_failed(dlpg_status_t st, const char *what) {
  if (st == DLPG_OK) return;
  std::string msg = what;
  msg += ": ";
  msg += dlpg__last_error();
  throw StatusError(st, msg);
}

static bool contains(const std::string &s, const char *needle) {
  return s.find(needle) != std::string::npos;
}

dlpg_status_t classify_gloo_message(const std::string &msg) {
  // Gloo 0.5 words its timeouts "Timed out waiting ...", "Read timeout", "Write timeout"
  // and "Connect timeout"; the socket layer says "timed out" (ETIMEDOUT).
  if (contains(msg, "Timed out") || contains(msg, "timed out") || contains(msg, "timeout") ||
      contains(msg, "Timeout"))
    return DLPG_ERR_TIMEOUT;
  if (contains(msg, "closed by peer") || contains(msg, "reset by peer") ||
      contains(msg, "Broken pipe") || contains(msg, "unexpectedly closed") ||
      contains(msg, "Connection refused") || contains(msg, "EOF"))
    return DLPG_ERR_REMOTE;
  return DLPG_ERR_SYSTEM;
}

dlpg_status_t classify_current_exception(std::string *text) {
  try {
    throw;
  } catch (const StatusError &e) {
    *text = e.what();
    return e.status();
  } catch (const ::gloo::Exception &e) {
    *text = e.what();
    return classify_gloo_message(*text);
  } catch (const std::bad_alloc &) {
    *text = "out of memory";
    return DLPG_ERR_SYSTEM;
  } catch (const std::exception &e) {
    // GLOO_ENFORCE failures (gloo::EnforceNotMet) derive from std::exception only.
    *text = e.what();
    return classify_gloo_message(*text);
  } catch (...) {
    *text = "unknown C++ exception";
    return DLPG_ERR_INTERNAL;
  }
}

dlpg_status_t status_from_current_exception(const char *fn, bool aborted) {
  std::string text;
  dlpg_status_t st = classify_current_exception(&text);
  if (aborted)
    return dlpg__error(DLPG_ERR_ABORTED, "%s: the group was aborted (%s)", fn, text.c_str());
  return dlpg__error(st, "%s: %s", fn, text.c_str());
}

}  // namespace dlpg_gloo
