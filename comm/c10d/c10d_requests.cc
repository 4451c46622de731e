#include "comm/c10d/c10d_requests.h"

#include <torch/torch.h>

#include <chrono>

#include "common/error.h"

namespace dynatrain::comm::c10d_detail {

namespace {

at::Tensor byte_tensor(const void* data, std::size_t bytes) {
  return torch::from_blob(const_cast<void*>(data), {static_cast<std::int64_t>(bytes)}, torch::kUInt8);
}

}  // namespace

void rethrow_as_comm_error(int rank, const std::string& what) {
  const std::string who = rank < 0 ? "c10d joining process" : detail::concat("c10d rank ", rank);
  try {
    throw;
  } catch (const CommError&) {
    throw;
  } catch (const c10::Error& e) {
    throw CommError(detail::concat(who, ": ", what, ": ", e.what_without_backtrace()));
  } catch (const std::exception& e) {
    throw CommError(detail::concat(who, ": ", what, ": ", e.what()));
  }
}

void wait_work(const Work& work, int rank, const std::string& what) {
  try {
    work->wait();
  } catch (...) {
    rethrow_as_comm_error(rank, what);
  }
}

void BlockingRequest::wait() {
  if (reported_) return;
  reported_ = true;
  if (poll_.valid())
    poll_.get();  // rethrows the helper's error
  else
    complete();
}

bool BlockingRequest::test() {
  if (reported_) return true;
  if (!poll_.valid()) poll_ = std::async(std::launch::async, [this] { complete(); });
  if (poll_.wait_for(std::chrono::seconds(0)) != std::future_status::ready) return false;
  wait();
  return true;
}

void BlockingRequest::settle() noexcept {
  try {
    wait();
  } catch (...) {
  }
}

SendRequest::SendRequest(const Group& group, int rank, const void* buf, std::size_t bytes, int peer, int tag)
    : header_(bytes), rank_(rank), what_(detail::concat("isend to ", peer, " (tag ", tag, ", ", bytes, " bytes)")) {
  try {
    std::vector<at::Tensor> header{byte_tensor(&header_, sizeof header_)};
    works_.push_back(group->send(header, peer, header_slot(tag)));
    if (bytes > 0) {  // Gloo needs a non-empty buffer; the header says "nothing follows"
      std::vector<at::Tensor> payload{byte_tensor(buf, bytes)};
      works_.push_back(group->send(payload, peer, payload_slot(tag)));
    }
  } catch (...) {
    rethrow_as_comm_error(rank, what_);
  }
}

void SendRequest::complete() {
  std::exception_ptr first;
  for (const Work& w : works_) {  // every part is waited for, so no buffer stays in use
    try {
      wait_work(w, rank_, what_);
    } catch (...) {
      if (!first) first = std::current_exception();
    }
  }
  if (first) std::rethrow_exception(first);
}

Channel::~Channel() {
  std::thread worker;
  {
    std::lock_guard lock(mu_);
    worker = std::move(worker_);
  }
  if (worker.joinable()) worker.join();
}

std::shared_ptr<PendingRecv> Channel::post(void* buf, std::size_t bytes) {
  auto p = std::make_shared<PendingRecv>();
  p->buf = buf;
  p->bytes = bytes;
  std::lock_guard lock(mu_);  // header receives are posted in the order of the queue
  try {
    std::vector<at::Tensor> header{byte_tensor(&p->header, sizeof p->header)};
    p->header_work = group_->recv(header, peer_, header_slot(tag_));
  } catch (...) {
    rethrow_as_comm_error(rank_, detail::concat("irecv from ", peer_, " (tag ", tag_, ", ", bytes, " bytes)"));
  }
  queue_.push_back(p);
  if (!running_) {
    if (worker_.joinable()) worker_.join();  // it left the loop; it only has to return
    running_ = true;
    worker_ = std::thread([this] { serve(); });
  }
  return p;
}

// Invariant: entries leave the queue in posting order, each after its payload receive was posted,
// so payload receives meet the sender's payloads in the order of their headers.
void Channel::serve() {
  for (;;) {
    std::shared_ptr<PendingRecv> p;
    {
      std::lock_guard lock(mu_);
      if (queue_.empty()) {
        running_ = false;
        return;
      }
      p = queue_.front();
      queue_.pop_front();
    }
    try {
      p->header_work->wait();
      if (p->header != p->bytes) p->drain.resize(p->header);
      if (p->header > 0) {
        void* into = p->header == p->bytes ? p->buf : p->drain.data();
        std::vector<at::Tensor> payload{byte_tensor(into, p->header)};
        p->payload_work = group_->recv(payload, peer_, payload_slot(tag_));
      }
    } catch (...) {
      p->error = std::current_exception();
    }
    {
      std::lock_guard lock(p->mu);
      p->posted = true;
    }
    p->cv.notify_all();
  }
}

void RecvRequest::complete() {
  PendingRecv& p = *pending_;
  {
    std::unique_lock lock(p.mu);
    p.cv.wait(lock, [&] { return p.posted; });
  }
  if (p.error) {
    try {
      std::rethrow_exception(p.error);
    } catch (...) {
      rethrow_as_comm_error(rank_, what_);
    }
  }
  if (p.payload_work) wait_work(p.payload_work, rank_, what_);
  if (p.header != p.bytes)
    throw CommError(
        detail::concat("c10d rank ", rank_, ": ", what_, ": the message has ", p.header, " bytes; sizes must match"));
}

Channel& Channels::at(int peer, int tag) {
  std::lock_guard lock(mu_);
  auto& slot = channels_[{peer, tag}];
  if (!slot) slot = std::make_unique<Channel>(group_, rank_, peer, tag);
  return *slot;
}

}  // namespace dynatrain::comm::c10d_detail
