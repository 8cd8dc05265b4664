#include "turnrl/kernels/redis_connection.h"

#include <hiredis/hiredis.h>
#include <pthread.h>
#include <signal.h>
#include <sys/time.h>

#include <algorithm>
#include <cstdlib>

#include "turnrl/core/error.h"

namespace turnrl {
namespace {

timeval to_timeval(double seconds) {
  seconds = std::max(seconds, 0.001);
  timeval tv;
  tv.tv_sec = time_t(seconds);
  tv.tv_usec = suseconds_t((seconds - double(tv.tv_sec)) * 1e6);
  return tv;
}

// hiredis writes with write(): a server that went away would raise SIGPIPE and kill the process.
// Blocks SIGPIPE in this thread for the duration of a call, then discards one it raised (the
// write itself fails with EPIPE, which becomes an error). The process's disposition is untouched.
class SigpipeBlock {
 public:
  SigpipeBlock() {
    sigemptyset(&pipe_);
    sigaddset(&pipe_, SIGPIPE);
    sigset_t pending;
    sigpending(&pending);
    was_pending_ = sigismember(&pending, SIGPIPE) == 1;
    pthread_sigmask(SIG_BLOCK, &pipe_, &old_);
  }
  ~SigpipeBlock() {
    sigset_t pending;
    sigpending(&pending);
    if (!was_pending_ && sigismember(&pending, SIGPIPE) == 1) {
      const timespec zero{0, 0};
      sigtimedwait(&pipe_, nullptr, &zero);
    }
    pthread_sigmask(SIG_SETMASK, &old_, nullptr);
  }

 private:
  sigset_t pipe_, old_;
  bool was_pending_ = false;
};

RedisReply convert(const redisReply* r) {
  RedisReply out;
  switch (r->type) {
    case REDIS_REPLY_STRING: out.type = RedisReply::Type::string, out.str.assign(r->str, r->len); break;
    case REDIS_REPLY_STATUS: out.type = RedisReply::Type::status, out.str.assign(r->str, r->len); break;
    case REDIS_REPLY_ERROR: out.type = RedisReply::Type::error, out.str.assign(r->str, r->len); break;
    case REDIS_REPLY_INTEGER: out.type = RedisReply::Type::integer, out.integer = r->integer; break;
    case REDIS_REPLY_ARRAY:
      out.type = RedisReply::Type::array;
      out.elements.reserve(r->elements);
      for (size_t i = 0; i < r->elements; ++i) out.elements.push_back(convert(r->element[i]));
      break;
    default: out.type = RedisReply::Type::nil; break;
  }
  return out;
}

bool parse_int(const std::string& s, int lo, int hi, int& v) {
  if (s.empty() || s.find_first_not_of("0123456789") != std::string::npos || s.size() > 9) return false;
  v = std::atoi(s.c_str());
  return v >= lo && v <= hi;
}

}  // namespace

RedisUrl parse_redis_url(const std::string& url, const std::string& field) {
  auto bad = [&](const std::string& why) {
    fail("{}: '{}' is not a Redis URL ({}); expected redis://[:password@]host[:port][/db]", field, url, why);
  };
  const std::string scheme = "redis://";
  if (url.rfind(scheme, 0) != 0) bad("it must start with redis://");
  std::string rest = url.substr(scheme.size());
  RedisUrl u;
  if (const size_t at = rest.rfind('@'); at != std::string::npos) {
    std::string auth = rest.substr(0, at);
    rest = rest.substr(at + 1);
    u.password = auth.rfind(':', 0) == 0 ? auth.substr(1) : auth;
  }
  if (const size_t slash = rest.find('/'); slash != std::string::npos) {
    const std::string db = rest.substr(slash + 1);
    rest = rest.substr(0, slash);
    if (!db.empty() && !parse_int(db, 0, 1 << 20, u.db)) bad("database '" + db + "' is not a number");
  }
  if (const size_t colon = rest.rfind(':'); colon != std::string::npos && rest.find(']') == std::string::npos) {
    if (!parse_int(rest.substr(colon + 1), 1, 65535, u.port)) bad("port '" + rest.substr(colon + 1) + "' is not in [1, 65535]");
    rest = rest.substr(0, colon);
  }
  if (rest.empty()) bad("no host");
  u.host = rest;
  return u;
}

RedisConnection::RedisConnection(const std::string& url, double connect_seconds)
    : url_(url), parsed_(parse_redis_url(url, "redis url")), connect_seconds_(connect_seconds) {
  connect();
}

RedisConnection::~RedisConnection() {
  if (ctx_) redisFree(ctx_);
}

void RedisConnection::connect() {
  if (ctx_) redisFree(ctx_);
  ctx_ = redisConnectWithTimeout(parsed_.host.c_str(), parsed_.port, to_timeval(connect_seconds_));
  if (!ctx_ || ctx_->err) {
    const std::string why = ctx_ ? ctx_->errstr : "out of memory";
    if (ctx_) redisFree(ctx_);
    ctx_ = nullptr;
    fail("redis {}: cannot connect: {}", url_, why);
  }
  redisEnableKeepAlive(ctx_);
  if (!parsed_.password.empty()) command({"AUTH", parsed_.password});
  if (parsed_.db != 0) command({"SELECT", std::to_string(parsed_.db)});
}

void RedisConnection::ensure_connected() {
  if (!ctx_ || ctx_->err) connect();
}

void RedisConnection::set_timeout(double seconds) { redisSetTimeout(ctx_, to_timeval(seconds)); }

RedisReply RedisConnection::read_reply(const std::string& what) {
  void* raw = nullptr;
  if (redisGetReply(ctx_, &raw) != REDIS_OK || !raw) {
    // The context is unusable after an I/O error or a timeout: the next call reconnects.
    const std::string why = ctx_->errstr[0] ? ctx_->errstr : "no reply";
    ctx_->err = ctx_->err ? ctx_->err : REDIS_ERR_IO;
    fail("redis {}: {}: {}", url_, what, why);
  }
  RedisReply r = convert(static_cast<redisReply*>(raw));
  freeReplyObject(raw);
  return r;
}

RedisReply RedisConnection::call(const std::vector<std::string>& args, double timeout_seconds) {
  return pipeline({args}, timeout_seconds).front();
}

RedisReply RedisConnection::command(const std::vector<std::string>& args, double timeout_seconds) {
  RedisReply r = call(args, timeout_seconds);
  if (r.is_error()) fail("redis {}: {}: {}", url_, args.empty() ? "" : args[0], r.str);
  return r;
}

std::vector<RedisReply> RedisConnection::pipeline(const std::vector<std::vector<std::string>>& commands,
                                                  double timeout_seconds) {
  SigpipeBlock no_sigpipe;
  ensure_connected();
  set_timeout(timeout_seconds);
  std::vector<const char*> argv;
  std::vector<size_t> lens;
  for (const auto& args : commands) {
    argv.clear(), lens.clear();
    for (const auto& a : args) argv.push_back(a.data()), lens.push_back(a.size());
    if (redisAppendCommandArgv(ctx_, int(argv.size()), argv.data(), lens.data()) != REDIS_OK)
      fail("redis {}: cannot queue {}: {}", url_, args.empty() ? "" : args[0], ctx_->errstr);
  }
  std::vector<RedisReply> replies;
  replies.reserve(commands.size());
  for (const auto& args : commands) replies.push_back(read_reply(args.empty() ? "" : args[0]));
  return replies;
}

}  // namespace turnrl
