// FunctionRef: a non-owning reference to a callable, for hot paths that must not allocate.
//
// std::function may allocate when it captures more than a couple of pointers; a thread pool dispatching a
// lambda per MoE layer call would then allocate on every call. FunctionRef stores a pointer to the callable and
// a trampoline, nothing else. The callable must outlive the FunctionRef (pass temporaries only as arguments).
#pragma once

#include <memory>
#include <type_traits>
#include <utility>

namespace kt {

template <typename Signature>
class FunctionRef;

template <typename R, typename... Args>
class FunctionRef<R(Args...)> {
public:
    template <typename F, typename = std::enable_if_t<!std::is_same_v<std::decay_t<F>, FunctionRef> &&
                                                      std::is_invocable_r_v<R, F &, Args...>>>
    FunctionRef(F &&f) noexcept  // NOLINT(google-explicit-constructor): used like a function parameter type
        : object_(const_cast<void *>(static_cast<const void *>(std::addressof(f)))),
          call_([](void *object, Args... args) -> R {
              return (*static_cast<std::remove_reference_t<F> *>(object))(std::forward<Args>(args)...);
          }) {}

    R operator()(Args... args) const { return call_(object_, std::forward<Args>(args)...); }

private:
    void *object_;
    R (*call_)(void *, Args...);
};

}  // namespace kt
