#include "controller/kube/kube_client.h"

#include <curl/curl.h>

#include <algorithm>
#include <cctype>
#include <mutex>
#include <optional>

namespace kwd::kube {

using nlohmann::json;

namespace {

constexpr size_t kMaxErrorBody = 64 * 1024;

void GlobalInit() {
  static std::once_flag once;
  std::call_once(once, [] { curl_global_init(CURL_GLOBAL_DEFAULT); });
}

bool StartsWithNoCase(std::string_view text, std::string_view prefix) {
  if (text.size() < prefix.size()) {
    return false;
  }
  for (size_t i = 0; i < prefix.size(); ++i) {
    if (std::tolower(static_cast<unsigned char>(text[i])) !=
        std::tolower(static_cast<unsigned char>(prefix[i]))) {
      return false;
    }
  }
  return true;
}

std::string MetadataResourceVersion(const json& object) {
  auto metadata = object.find("metadata");
  if (metadata == object.end() || !metadata->is_object()) {
    return {};
  }
  auto rv = metadata->find("resourceVersion");
  return rv != metadata->end() && rv->is_string() ? rv->get<std::string>() : std::string();
}

// Fills reason/message from a Status object (an error body or an ERROR event).
void DecodeStatusObject(const json& body, ApiStatus* status) {
  if (!body.is_object()) {
    return;
  }
  if (auto reason = body.find("reason"); reason != body.end() && reason->is_string()) {
    status->reason = reason->get<std::string>();
  }
  if (auto message = body.find("message"); message != body.end() && message->is_string()) {
    status->message = message->get<std::string>();
  }
  if (auto code = body.find("code"); code != body.end() && code->is_number_integer()) {
    status->http_code = code->get<long>();
  }
}

}  // namespace

std::string ApiStatus::ToString() const {
  std::string text = std::to_string(http_code);
  if (!reason.empty()) {
    text += " " + reason;
  }
  if (!message.empty()) {
    text += ": " + message;
  }
  return text;
}

std::string_view WatchEventTypeName(WatchEventType type) {
  switch (type) {
    case WatchEventType::kAdded:
      return "ADDED";
    case WatchEventType::kModified:
      return "MODIFIED";
    case WatchEventType::kDeleted:
      return "DELETED";
    case WatchEventType::kBookmark:
      return "BOOKMARK";
  }
  return "UNKNOWN";
}

std::string_view WatchEndName(WatchEnd end) {
  switch (end) {
    case WatchEnd::kStopped:
      return "stopped";
    case WatchEnd::kClosed:
      return "closed";
    case WatchEnd::kRelistNeeded:
      return "relist-needed";
    case WatchEnd::kFailed:
      return "failed";
  }
  return "unknown";
}

std::string EscapeQueryValue(std::string_view value) {
  static constexpr char kHex[] = "0123456789ABCDEF";
  std::string out;
  for (unsigned char c : value) {
    if (std::isalnum(c) || c == '-' || c == '_' || c == '.' || c == '~') {
      out.push_back(static_cast<char>(c));
    } else {
      out.push_back('%');
      out.push_back(kHex[c >> 4]);
      out.push_back(kHex[c & 15]);
    }
  }
  return out;
}

// An easy handle driven by its own multi handle, so a transfer can wait in
// curl_multi_poll and be woken by curl_multi_wakeup from another thread.
// Connections stay cached in the multi handle between requests.
struct KubeClient::Session {
  Session() : easy(curl_easy_init()), multi(curl_multi_init()) {}
  ~Session() {
    curl_multi_cleanup(multi);
    curl_easy_cleanup(easy);
  }
  Session(const Session&) = delete;
  Session& operator=(const Session&) = delete;

  CURL* easy;
  CURLM* multi;
  uint64_t exec_generation = 0;  // the exec credential its connections were made with
};

// One HTTP exchange: what to send and what came back.
struct KubeClient::Transfer {
  // Request.
  const char* method = "GET";
  std::string path_and_query;
  std::string body;
  std::string content_type;
  bool streaming = false;
  std::chrono::milliseconds timeout{0};  // 0: ClientOptions::request_timeout; streams: none
  // Streaming: receives the 200 body as it arrives; false aborts the transfer.
  std::function<bool(std::string_view)> on_data;
  std::stop_token stop;

  // Response.
  CURLcode code = CURLE_OK;
  long http_code = 0;
  std::string response_body;  // whole body, or the error body of a streaming request
  std::optional<long> retry_after_seconds;
  bool stopped = false;
  bool aborted_by_consumer = false;
  std::string credential_error;  // the exec plugin failed: nothing was sent
  char error_buffer[CURL_ERROR_SIZE] = {};

  ApiStatus Status() const {
    ApiStatus status;
    status.http_code = http_code;
    if (!credential_error.empty()) {
      status.http_code = 0;
      status.reason = "ExecPlugin";
      status.message = credential_error;
      return status;
    }
    if (stopped) {
      status.http_code = 0;
      status.reason = "Stopped";
      return status;
    }
    if (code != CURLE_OK && !aborted_by_consumer) {
      status.http_code = 0;
      status.reason = code == CURLE_OPERATION_TIMEDOUT ? "Stalled" : "Transport";
      status.message = error_buffer[0] != '\0' ? error_buffer : curl_easy_strerror(code);
      return status;
    }
    if (!status.ok()) {
      json decoded = json::parse(response_body, nullptr, false);
      if (decoded.is_object() && decoded.value("kind", "") == "Status") {
        DecodeStatusObject(decoded, &status);
        status.http_code = http_code;  // the HTTP status wins over the body's code
      } else {
        status.reason = "HTTP" + std::to_string(http_code);
        status.message = response_body.substr(0, 512);
      }
    }
    return status;
  }
};

namespace {

size_t OnBody(char* data, size_t size, size_t count, void* user) {
  auto* transfer = static_cast<KubeClient::Transfer*>(user);
  std::string_view chunk(data, size * count);
  if (transfer->streaming && transfer->http_code == 200) {
    if (!transfer->on_data(chunk)) {
      transfer->aborted_by_consumer = true;
      return 0;  // CURLE_WRITE_ERROR ends the transfer
    }
    return chunk.size();
  }
  if (transfer->streaming && transfer->response_body.size() > kMaxErrorBody) {
    return chunk.size();  // an error body: keep the beginning only
  }
  transfer->response_body.append(chunk);
  return chunk.size();
}

size_t OnHeader(char* data, size_t size, size_t count, void* user) {
  auto* transfer = static_cast<KubeClient::Transfer*>(user);
  std::string_view line(data, size * count);
  if (StartsWithNoCase(line, "HTTP/")) {
    // A new response (after a redirect or 100 Continue): its status code.
    size_t space = line.find(' ');
    if (space != std::string_view::npos) {
      transfer->http_code =
          std::strtol(std::string(line.substr(space + 1, 3)).c_str(), nullptr, 10);
    }
    transfer->retry_after_seconds.reset();
  } else if (StartsWithNoCase(line, "Retry-After:")) {
    std::string value(line.substr(12));
    char* end = nullptr;
    long seconds = std::strtol(value.c_str(), &end, 10);
    if (end != value.c_str() && seconds >= 0) {
      transfer->retry_after_seconds = seconds;  // the HTTP-date form is not used by apiservers
    }
  }
  return line.size();
}

int OnProgress(void* user, curl_off_t, curl_off_t, curl_off_t, curl_off_t) {
  auto* transfer = static_cast<KubeClient::Transfer*>(user);
  return transfer->stop.stop_requested() ? 1 : 0;
}

}  // namespace

KubeClient::KubeClient(KubeConfig config, ClientOptions options)
    : config_(std::move(config)),
      options_(std::move(options)),
      clock_(options_.clock ? options_.clock : std::make_shared<RealClock>()),
      sleeper_(options_.sleeper ? options_.sleeper : std::make_shared<RealSleeper>()),
      tokens_(config_.token, config_.token_file, *clock_, options_.token_refresh_interval) {
  if (config_.exec) {
    exec_ = std::make_unique<ExecCredentialSource>(
        *config_.exec, *clock_, options_.exec_refresh_margin, options_.exec_timeout);
  }
  GlobalInit();
}

KubeClient::~KubeClient() = default;

std::unique_ptr<KubeClient::Session> KubeClient::Borrow() {
  {
    std::lock_guard lock(pool_mutex_);
    if (!idle_sessions_.empty()) {
      auto session = std::move(idle_sessions_.back());
      idle_sessions_.pop_back();
      return session;
    }
  }
  return std::make_unique<Session>();
}

void KubeClient::Return(std::unique_ptr<Session> session) {
  constexpr size_t kMaxIdleSessions = 4;
  std::lock_guard lock(pool_mutex_);
  if (idle_sessions_.size() < kMaxIdleSessions) {
    idle_sessions_.push_back(std::move(session));
  }
}

void KubeClient::Execute(Transfer& transfer) {
  bool reread_token = false;
  int throttled = 0;
  while (true) {
    transfer.code = CURLE_OK;
    transfer.http_code = 0;
    transfer.response_body.clear();
    transfer.retry_after_seconds.reset();
    transfer.stopped = false;
    transfer.aborted_by_consumer = false;
    transfer.credential_error.clear();
    transfer.error_buffer[0] = '\0';

    ExecCredential exec_credential;
    if (exec_ && !exec_->Get(&exec_credential, &transfer.credential_error)) {
      return;
    }

    std::unique_ptr<Session> session = Borrow();
    CURL* easy = session->easy;
    curl_easy_reset(easy);
    std::string url = config_.server + transfer.path_and_query;
    curl_easy_setopt(easy, CURLOPT_URL, url.c_str());
    curl_easy_setopt(easy, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(easy, CURLOPT_USERAGENT, options_.user_agent.c_str());
    curl_easy_setopt(easy, CURLOPT_ERRORBUFFER, transfer.error_buffer);
    curl_easy_setopt(easy, CURLOPT_CONNECTTIMEOUT_MS,
                     static_cast<long>(options_.connect_timeout.count()));
    curl_easy_setopt(easy, CURLOPT_WRITEFUNCTION, OnBody);
    curl_easy_setopt(easy, CURLOPT_WRITEDATA, &transfer);
    curl_easy_setopt(easy, CURLOPT_HEADERFUNCTION, OnHeader);
    curl_easy_setopt(easy, CURLOPT_HEADERDATA, &transfer);
    curl_easy_setopt(easy, CURLOPT_NOPROGRESS, 0L);
    curl_easy_setopt(easy, CURLOPT_XFERINFOFUNCTION, OnProgress);
    curl_easy_setopt(easy, CURLOPT_XFERINFODATA, &transfer);
    if (transfer.streaming) {
      // A stream may be silent for as long as it lasts (a quiet watch); a
      // dead peer is found by TCP keepalive, a hung server by the deadline.
      curl_easy_setopt(easy, CURLOPT_TCP_KEEPALIVE, 1L);
      curl_easy_setopt(easy, CURLOPT_TCP_KEEPIDLE, 30L);
      curl_easy_setopt(easy, CURLOPT_TCP_KEEPINTVL, 10L);
      if (transfer.timeout.count() > 0) {
        curl_easy_setopt(easy, CURLOPT_TIMEOUT_MS, static_cast<long>(transfer.timeout.count()));
      }
    } else {
      auto timeout = transfer.timeout.count() > 0 ? transfer.timeout : options_.request_timeout;
      curl_easy_setopt(easy, CURLOPT_TIMEOUT_MS,
                       static_cast<long>(std::max<int64_t>(1, timeout.count())));
    }

    // TLS: PEM blobs, so nothing has to be written to disk.
    if (!config_.ca_pem.empty()) {
      curl_blob ca{const_cast<char*>(config_.ca_pem.data()), config_.ca_pem.size(), CURL_BLOB_COPY};
      curl_easy_setopt(easy, CURLOPT_CAINFO_BLOB, &ca);
    }
    if (config_.insecure_skip_tls_verify) {
      curl_easy_setopt(easy, CURLOPT_SSL_VERIFYPEER, 0L);
      curl_easy_setopt(easy, CURLOPT_SSL_VERIFYHOST, 0L);
    }
    // A client certificate from the kubeconfig or from the exec plugin (never both).
    const std::string& cert_pem = exec_ ? exec_credential.client_cert_pem : config_.client_cert_pem;
    const std::string& key_pem = exec_ ? exec_credential.client_key_pem : config_.client_key_pem;
    if (exec_ && session->exec_generation != exec_credential.generation) {
      // A new credential: no connection made with the old certificate is reused.
      if (session->exec_generation != 0 && !cert_pem.empty()) {
        curl_easy_setopt(easy, CURLOPT_FRESH_CONNECT, 1L);
      }
      session->exec_generation = exec_credential.generation;
    }
    if (!cert_pem.empty()) {
      curl_blob cert{const_cast<char*>(cert_pem.data()), cert_pem.size(), CURL_BLOB_COPY};
      curl_blob key{const_cast<char*>(key_pem.data()), key_pem.size(), CURL_BLOB_COPY};
      curl_easy_setopt(easy, CURLOPT_SSLCERTTYPE, "PEM");
      curl_easy_setopt(easy, CURLOPT_SSLCERT_BLOB, &cert);
      curl_easy_setopt(easy, CURLOPT_SSLKEYTYPE, "PEM");
      curl_easy_setopt(easy, CURLOPT_SSLKEY_BLOB, &key);
    }

    curl_slist* headers = nullptr;
    headers = curl_slist_append(headers, "Accept: application/json");
    headers = curl_slist_append(headers, "Expect:");
    std::string token = exec_ ? exec_credential.token : tokens_.Token();
    std::string authorization = "Authorization: Bearer " + token;
    if (!token.empty()) {
      headers = curl_slist_append(headers, authorization.c_str());
    }
    std::string content_type = "Content-Type: " + transfer.content_type;
    std::string method = transfer.method;
    if (method != "GET") {
      curl_easy_setopt(easy, CURLOPT_CUSTOMREQUEST, transfer.method);
    }
    if (method == "POST" || method == "PUT" || method == "PATCH") {
      headers = curl_slist_append(headers, content_type.c_str());
      curl_easy_setopt(easy, CURLOPT_POSTFIELDS, transfer.body.c_str());
      curl_easy_setopt(easy, CURLOPT_POSTFIELDSIZE, static_cast<long>(transfer.body.size()));
    }
    curl_easy_setopt(easy, CURLOPT_HTTPHEADER, headers);

    CURLM* multi = session->multi;
    curl_multi_add_handle(multi, easy);
    {
      std::stop_callback wake(transfer.stop, [multi] { curl_multi_wakeup(multi); });
      int running = 1;
      while (running > 0) {
        if (curl_multi_perform(multi, &running) != CURLM_OK) {
          break;
        }
        if (running == 0) {
          break;
        }
        if (transfer.stop.stop_requested()) {
          transfer.stopped = true;
          break;
        }
        curl_multi_poll(multi, nullptr, 0, 1000, nullptr);
      }
    }
    int queued = 0;
    while (CURLMsg* message = curl_multi_info_read(multi, &queued)) {
      if (message->msg == CURLMSG_DONE && message->easy_handle == easy) {
        transfer.code = message->data.result;
      }
    }
    if (transfer.code == CURLE_ABORTED_BY_CALLBACK) {
      transfer.stopped = true;
    }
    curl_multi_remove_handle(multi, easy);
    curl_easy_setopt(easy, CURLOPT_HTTPHEADER, nullptr);
    curl_slist_free_all(headers);
    Return(std::move(session));

    if (transfer.stopped) {
      return;
    }
    if (transfer.http_code == 401 && (exec_ || tokens_.FromFile()) && !reread_token) {
      // A projected token may have rotated under us, or the plugin's credential
      // was revoked before its expiry: read the file or run the plugin again,
      // retry once.
      reread_token = true;
      if (exec_) {
        exec_->Invalidate(exec_credential.generation);
      } else {
        tokens_.Invalidate();
      }
      continue;
    }
    if (transfer.http_code == 429 && throttled < options_.max_throttle_retries) {
      ++throttled;
      auto wait = std::chrono::seconds(transfer.retry_after_seconds.value_or(1));
      wait = std::min(wait, options_.max_retry_after);
      if (!sleeper_->SleepFor(wait, transfer.stop)) {
        transfer.stopped = true;
        return;
      }
      continue;
    }
    return;
  }
}

ApiResult KubeClient::Simple(const char* method, std::string_view path, const json* body,
                             std::string_view content_type, std::chrono::milliseconds timeout) {
  Transfer transfer;
  transfer.method = method;
  transfer.timeout = timeout;
  transfer.path_and_query = std::string(path);
  if (body != nullptr) {
    transfer.body = body->dump();
    transfer.content_type = std::string(content_type);
  }
  Execute(transfer);
  ApiResult result;
  result.status = transfer.Status();
  if (!transfer.response_body.empty() && transfer.code == CURLE_OK) {
    result.body = json::parse(transfer.response_body, nullptr, false);
    if (result.body.is_discarded()) {
      result.body = nullptr;
      if (result.status.ok()) {
        result.status.reason = "BadResponse";
        result.status.message = "the answer is not JSON";
        result.status.http_code = 0;
      }
    }
  }
  return result;
}

ApiResult KubeClient::Get(std::string_view path) {
  return Simple("GET", path, nullptr, {});
}

ApiResult KubeClient::Post(std::string_view path, const json& body) {
  return Simple("POST", path, &body, "application/json");
}

ApiResult KubeClient::Put(std::string_view path, const json& body) {
  return Simple("PUT", path, &body, "application/json");
}

ApiResult KubeClient::Patch(std::string_view path, const json& body,
                            std::string_view content_type) {
  return Simple("PATCH", path, &body, content_type);
}

ApiResult KubeClient::Delete(std::string_view path) {
  return Simple("DELETE", path, nullptr, {});
}

ApiResult KubeClient::MergePatchStatus(std::string_view object_path, const json& patch) {
  return Patch(std::string(object_path) + "/status", patch, "application/merge-patch+json");
}

ListResult KubeClient::List(std::string_view path, std::string_view label_selector,
                            std::stop_token stop) {
  ListResult result;
  std::string continue_token;
  while (true) {
    std::string query = std::string(path) + "?limit=" + std::to_string(options_.page_size);
    if (!label_selector.empty()) {
      query += "&labelSelector=" + EscapeQueryValue(label_selector);
    }
    if (!continue_token.empty()) {
      query += "&continue=" + EscapeQueryValue(continue_token);
    }
    Transfer transfer;
    transfer.path_and_query = query;
    transfer.stop = stop;
    Execute(transfer);
    ApiStatus status = transfer.Status();
    if (!status.ok()) {
      if (status.IsGone() && !continue_token.empty() &&
          result.restarts < options_.max_list_restarts) {
        // The continue token expired: the pages so far are no longer one
        // consistent snapshot, so start over.
        ++result.restarts;
        result.items.clear();
        continue_token.clear();
        continue;
      }
      result.status = status;
      result.items.clear();
      return result;
    }
    json page = json::parse(transfer.response_body, nullptr, false);
    if (!page.is_object() || !page.contains("items") ||
        !(page["items"].is_array() || page["items"].is_null())) {
      result.status = {0, "BadResponse", "the list answer is not a List object"};
      result.items.clear();
      return result;
    }
    ++result.pages;
    if (page["items"].is_array()) {
      for (auto& item : page["items"]) {
        result.items.push_back(std::move(item));
      }
    }
    result.resource_version = MetadataResourceVersion(page);
    continue_token.clear();
    if (auto metadata = page.find("metadata"); metadata != page.end() && metadata->is_object()) {
      if (auto next = metadata->find("continue"); next != metadata->end() && next->is_string()) {
        continue_token = next->get<std::string>();
      }
    }
    if (continue_token.empty()) {
      result.status = status;
      return result;
    }
  }
}

WatchResult KubeClient::Watch(std::string_view path, const WatchOptions& options,
                              const WatchCallback& callback, std::stop_token stop) {
  WatchResult result;
  result.last_resource_version = options.resource_version;
  std::string query = std::string(path) + "?watch=1";
  if (!options.resource_version.empty()) {
    query += "&resourceVersion=" + EscapeQueryValue(options.resource_version);
  }
  if (options.allow_bookmarks) {
    query += "&allowWatchBookmarks=true";
  }
  query += "&timeoutSeconds=" + std::to_string(options.timeout_seconds);
  if (!options.label_selector.empty()) {
    query += "&labelSelector=" + EscapeQueryValue(options.label_selector);
  }

  std::string pending;  // an incomplete line carried over to the next chunk
  std::optional<ApiStatus> error_event;
  bool malformed = false;
  auto handle_line = [&](std::string_view line) -> bool {
    while (!line.empty() && (line.back() == '\r' || line.back() == ' ')) {
      line.remove_suffix(1);
    }
    if (line.empty()) {
      return true;
    }
    json event = json::parse(line, nullptr, false);
    if (!event.is_object() || !event.contains("type") || !event["type"].is_string() ||
        !event.contains("object") || !event["object"].is_object()) {
      malformed = true;
      return false;
    }
    const std::string& type = event["type"].get_ref<const std::string&>();
    const json& object = event["object"];
    WatchEventType event_type;
    if (type == "ADDED") {
      event_type = WatchEventType::kAdded;
    } else if (type == "MODIFIED") {
      event_type = WatchEventType::kModified;
    } else if (type == "DELETED") {
      event_type = WatchEventType::kDeleted;
    } else if (type == "BOOKMARK") {
      event_type = WatchEventType::kBookmark;
    } else if (type == "ERROR") {
      ApiStatus status;
      status.http_code = 410;
      status.reason = "Expired";
      DecodeStatusObject(object, &status);
      error_event = status;
      return false;
    } else {
      return true;  // an event type from the future: skip it
    }
    std::string rv = MetadataResourceVersion(object);
    if (!rv.empty()) {
      result.last_resource_version = rv;
    }
    ++result.events;
    callback(event_type, object);
    return true;
  };

  Transfer transfer;
  transfer.path_and_query = query;
  transfer.streaming = true;
  transfer.timeout = std::chrono::seconds(std::max(1, options.timeout_seconds)) +
                     std::max(std::chrono::seconds(1), options.deadline_grace);
  transfer.stop = stop;
  transfer.on_data = [&](std::string_view chunk) -> bool {
    pending.append(chunk);
    size_t start = 0;
    for (size_t newline = pending.find('\n', start); newline != std::string::npos;
         newline = pending.find('\n', start)) {
      if (!handle_line(std::string_view(pending).substr(start, newline - start))) {
        return false;
      }
      start = newline + 1;
    }
    pending.erase(0, start);
    return true;
  };
  Execute(transfer);

  if (transfer.stopped) {
    result.end = WatchEnd::kStopped;
    result.status = transfer.Status();
  } else if (error_event) {
    result.end = WatchEnd::kRelistNeeded;
    result.status = *error_event;
  } else if (malformed) {
    result.end = WatchEnd::kFailed;
    result.status = {0, "BadResponse", "malformed watch event"};
  } else {
    result.status = transfer.Status();
    if (result.status.reason == "Stalled") {
      result.status.message = "the server did not end the watch within timeoutSeconds=" +
                              std::to_string(options.timeout_seconds) + " + " +
                              std::to_string(options.deadline_grace.count()) + "s";
    }
    if (result.status.IsGone()) {
      result.end = WatchEnd::kRelistNeeded;
    } else if (result.status.ok()) {
      result.end = WatchEnd::kClosed;
    } else {
      result.end = WatchEnd::kFailed;
    }
  }
  return result;
}

ApiResult KubeClient::GetLease(std::string_view ns, std::string_view name,
                               std::chrono::milliseconds timeout) {
  return Simple("GET", LeasesPath(ns) + "/" + std::string(name), nullptr, {}, timeout);
}

ApiResult KubeClient::CreateLease(std::string_view ns, const json& lease,
                                  std::chrono::milliseconds timeout) {
  return Simple("POST", LeasesPath(ns), &lease, "application/json", timeout);
}

ApiResult KubeClient::UpdateLease(std::string_view ns, std::string_view name, const json& lease,
                                  std::chrono::milliseconds timeout) {
  return Simple("PUT", LeasesPath(ns) + "/" + std::string(name), &lease, "application/json",
                timeout);
}

}  // namespace kwd::kube
