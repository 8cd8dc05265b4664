#pragma once
// A small synchronous Redis client (over hiredis) for the remote evaluator: a connection made from
// a redis:// URL, commands as binary-safe argument lists, replies as plain values, and a time limit
// on every call, so that no Redis operation can block its caller forever. A connection that broke
// (I/O error, timeout) reconnects on the next call. Built only with hiredis (TURNRL_WITH_REDIS).
#include <cstdint>
#include <string>
#include <vector>

struct redisContext;

namespace turnrl {

// redis://[:password@]host[:port][/db]
struct RedisUrl {
  std::string host = "127.0.0.1";
  int port = 6379;
  std::string password;
  int db = 0;
};
// Throws turnrl::Error naming `field` (e.g. evaluator.remote.redis_url) and the accepted form.
RedisUrl parse_redis_url(const std::string& url, const std::string& field);

struct RedisReply {
  enum class Type { nil, string, integer, array, status, error };
  Type type = Type::nil;
  std::string str;  // string, status, error
  int64_t integer = 0;
  std::vector<RedisReply> elements;

  bool is_nil() const { return type == Type::nil; }
  bool is_error() const { return type == Type::error; }
};

class RedisConnection {
 public:
  // Connects (at most connect_seconds); throws turnrl::Error naming the URL and the cause.
  explicit RedisConnection(const std::string& url, double connect_seconds = 5);
  ~RedisConnection();
  RedisConnection(const RedisConnection&) = delete;
  RedisConnection& operator=(const RedisConnection&) = delete;

  // One command; waits at most timeout_seconds for the reply. Throws turnrl::Error on I/O errors,
  // timeouts and error replies ("-ERR ..."), naming the command.
  RedisReply command(const std::vector<std::string>& args, double timeout_seconds = 10);
  // The same, but an error reply is returned (type error) instead of thrown.
  RedisReply call(const std::vector<std::string>& args, double timeout_seconds = 10);
  // Sends every command, then reads the replies in order (one round trip). Error replies are
  // returned, I/O errors thrown. Redis runs a connection's commands in the order they arrive.
  std::vector<RedisReply> pipeline(const std::vector<std::vector<std::string>>& commands, double timeout_seconds = 10);

  const std::string& url() const { return url_; }

 private:
  void connect();
  void ensure_connected();
  void set_timeout(double seconds);
  RedisReply read_reply(const std::string& what);

  std::string url_;
  RedisUrl parsed_;
  double connect_seconds_;
  redisContext* ctx_ = nullptr;
};

}  // namespace turnrl
