// The CPU execution of one CUDA launch: every block of the grid in turn, and
// in each block every thread as a fiber (a user-mode context with its own
// stack) on the calling OS thread.
//
// Data flow: `emu_launch` (called from Rust with a kernel's trampoline and
// CUDA-style `void** params`) runs the blocks; for each block it resets the
// per-block state, starts one fiber per thread and switches between them.
// A fiber runs until it exits or waits: at `__syncthreads` (until every
// thread of the block arrives) or at a warp collective (until every lane of
// the mask arrives). The last arrival completes the operation, marks the
// waiters ready and continues; a waiting fiber switches directly to the next
// ready one (FIFO), or back to the launch loop when none is ready. When the
// launch loop gets control back and some threads have neither exited nor can
// run, the block is deadlocked: on a GPU it would hang; here the launch
// returns an error that describes who waits where.
//
// Context switch: a few lines of assembly for x86_64 (System V) and aarch64
// (saving only callee-saved registers, no signal mask), `ucontext` elsewhere
// or when GGML_CUDA_EMU_UCONTEXT is defined. Fiber stacks (64 KiB, a guard
// page below each) are mapped once per OS thread and reused by every launch
// on that thread; a fiber takes one when it first runs and (assembly
// switch) gives it back when it exits, so the next thread started runs on
// the same, cache-warm stack.
#include "prelude.h"

#include <sys/mman.h>
#include <unistd.h>

#include <atomic>
#include <new>

#if !defined(GGML_CUDA_EMU_UCONTEXT) && defined(__ELF__) && \
    (defined(__x86_64__) || defined(__aarch64__))
#define EMU_ASM_SWITCH 1
#else
#include <ucontext.h>
#endif

extern "C" {
__thread uint3 threadIdx;
__thread uint3 blockIdx;
__thread dim3 blockDim;
__thread dim3 gridDim;
}

namespace {

constexpr unsigned MAX_THREADS = 1024;
constexpr size_t STACK_BYTES = 64 * 1024;

// ------------------------------------------------------- context switch

// A suspended context: its saved stack pointer (assembly) or ucontext.
#ifdef EMU_ASM_SWITCH
struct Ctx {
    void* sp;
};

extern "C" {
// Save the callee-saved registers on this stack and its sp in *save, then
// resume the context whose sp is `to`.
void emu_ctx_switch(void** save, void* to);
// Save as above, then start a new fiber (emu_fiber_main) at stack top `top`.
void emu_ctx_switch_start(void** save, char* top);
// Resume `to` without saving anything (the caller has exited).
[[noreturn]] void emu_ctx_jump(void* to);
// Start a new fiber at `top` without saving anything: the exited caller's
// stack may be the one reused.
[[noreturn]] void emu_ctx_jump_start(char* top);
void emu_fiber_main();
}

#if defined(__x86_64__)
asm(R"(
    .text
    .globl emu_ctx_switch
    .hidden emu_ctx_switch
    .type emu_ctx_switch, @function
    .p2align 4
emu_ctx_switch:
    pushq %rbp
    pushq %rbx
    pushq %r12
    pushq %r13
    pushq %r14
    pushq %r15
    movq %rsp, (%rdi)
    movq %rsi, %rsp
    popq %r15
    popq %r14
    popq %r13
    popq %r12
    popq %rbx
    popq %rbp
    ret
    .size emu_ctx_switch, .-emu_ctx_switch

    .globl emu_ctx_switch_start
    .hidden emu_ctx_switch_start
    .type emu_ctx_switch_start, @function
    .p2align 4
emu_ctx_switch_start:
    pushq %rbp
    pushq %rbx
    pushq %r12
    pushq %r13
    pushq %r14
    pushq %r15
    movq %rsp, (%rdi)
    movq %rsi, %rsp
    xorl %ebp, %ebp
    call emu_fiber_main
    ud2
    .size emu_ctx_switch_start, .-emu_ctx_switch_start

    .globl emu_ctx_jump
    .hidden emu_ctx_jump
    .type emu_ctx_jump, @function
    .p2align 4
emu_ctx_jump:
    movq %rdi, %rsp
    popq %r15
    popq %r14
    popq %r13
    popq %r12
    popq %rbx
    popq %rbp
    ret
    .size emu_ctx_jump, .-emu_ctx_jump

    .globl emu_ctx_jump_start
    .hidden emu_ctx_jump_start
    .type emu_ctx_jump_start, @function
    .p2align 4
emu_ctx_jump_start:
    movq %rdi, %rsp
    xorl %ebp, %ebp
    call emu_fiber_main
    ud2
    .size emu_ctx_jump_start, .-emu_ctx_jump_start
)");
#else
// aarch64: x19-x30 and d8-d15 in a 176-byte frame.
asm(R"(
    .macro EMU_SAVE
    sub sp, sp, #176
    stp x19, x20, [sp, #0]
    stp x21, x22, [sp, #16]
    stp x23, x24, [sp, #32]
    stp x25, x26, [sp, #48]
    stp x27, x28, [sp, #64]
    stp x29, x30, [sp, #80]
    stp d8, d9, [sp, #96]
    stp d10, d11, [sp, #112]
    stp d12, d13, [sp, #128]
    stp d14, d15, [sp, #144]
    mov x2, sp
    str x2, [x0]
    .endm
    .macro EMU_RESTORE
    ldp x19, x20, [sp, #0]
    ldp x21, x22, [sp, #16]
    ldp x23, x24, [sp, #32]
    ldp x25, x26, [sp, #48]
    ldp x27, x28, [sp, #64]
    ldp x29, x30, [sp, #80]
    ldp d8, d9, [sp, #96]
    ldp d10, d11, [sp, #112]
    ldp d12, d13, [sp, #128]
    ldp d14, d15, [sp, #144]
    add sp, sp, #176
    .endm

    .text
    .globl emu_ctx_switch
    .hidden emu_ctx_switch
    .type emu_ctx_switch, %function
    .p2align 4
emu_ctx_switch:
    EMU_SAVE
    mov sp, x1
    EMU_RESTORE
    ret
    .size emu_ctx_switch, .-emu_ctx_switch

    .globl emu_ctx_switch_start
    .hidden emu_ctx_switch_start
    .type emu_ctx_switch_start, %function
    .p2align 4
emu_ctx_switch_start:
    EMU_SAVE
    mov sp, x1
    mov x29, #0
    bl emu_fiber_main
    brk #0
    .size emu_ctx_switch_start, .-emu_ctx_switch_start

    .globl emu_ctx_jump
    .hidden emu_ctx_jump
    .type emu_ctx_jump, %function
    .p2align 4
emu_ctx_jump:
    mov sp, x0
    EMU_RESTORE
    ret
    .size emu_ctx_jump, .-emu_ctx_jump

    .globl emu_ctx_jump_start
    .hidden emu_ctx_jump_start
    .type emu_ctx_jump_start, %function
    .p2align 4
emu_ctx_jump_start:
    mov sp, x0
    mov x29, #0
    bl emu_fiber_main
    brk #0
    .size emu_ctx_jump_start, .-emu_ctx_jump_start
)");
#endif
#else
struct Ctx {
    ucontext_t uc;
};
extern "C" void emu_fiber_main();
#endif

// ---------------------------------------------------------------- state

enum FiberState { READY, WAIT_BAR, WAIT_WARP, DONE };

// One pending cp.async copy: done (source read, destination written) when
// a cp.async.wait_group covers its group, as the copy engine completes it
// some time before; until then the destination holds the poison bytes
// written at issue.
struct CpAsync {
    void* dst;
    const void* src;
    unsigned bytes;
    unsigned group;
};
constexpr unsigned CP_ASYNC_MAX = 64;

struct Fiber {
    Ctx ctx;
    bool started; // has run (has a stack)
    unsigned stack; // index of its stack, once started
    uint3 tid;
    unsigned warp, lane;
    FiberState state;
    // the warp collective this lane waits in
    int wkind;
    unsigned wmask;
    unsigned long long wval;
    int warg, wwidth;
    unsigned long long wresult;
    unsigned long long wresult2; // second word (EMU_MMA_S8's high half)
    // the lanes of the last warp collective this lane completed (all
    // lanes of its warp before any): what __activemask reports
    unsigned conv_mask;
    // cp.async copies issued and not yet waited for (`emu_cp_async`), in
    // issue order, each with its commit group; groups committed so far
    CpAsync cp[CP_ASYNC_MAX];
    unsigned ncp;
    unsigned cp_groups;
};

const char* warp_op_name(int kind) {
    switch (kind) {
    case EMU_SHFL_IDX: return "__shfl_sync";
    case EMU_SHFL_UP: return "__shfl_up_sync";
    case EMU_SHFL_DOWN: return "__shfl_down_sync";
    case EMU_SHFL_XOR: return "__shfl_xor_sync";
    case EMU_BALLOT: return "__ballot_sync";
    case EMU_ALL: return "__all_sync";
    case EMU_ANY: return "__any_sync";
    case EMU_REDUCE_ADD: return "__reduce_add_sync";
    case EMU_REDUCE_MIN: return "__reduce_min_sync";
    case EMU_REDUCE_MAX: return "__reduce_max_sync";
    case EMU_REDUCE_AND: return "__reduce_and_sync";
    case EMU_REDUCE_OR: return "__reduce_or_sync";
    case EMU_REDUCE_XOR: return "__reduce_xor_sync";
    case EMU_MMA_S8: return "mma.sync.m16n8k16.s8";
    case EMU_GATHER: return "warp_sum/warp_max (__shfl_xor_sync butterfly)";
    case EMU_WARP_CALL: return "a warp-wide instruction (mma.sync / ldmatrix)";
    default: return "__syncwarp";
    }
}

// Why a launch stopped early (`emu_launch`'s return value).
enum Failure { OK = 0, DEADLOCK = 1, MISUSE = 2, NO_MEMORY = 3 };

struct Sched {
    Ctx sched_ctx;          // the launch loop, on the OS thread's own stack
    char* region = nullptr; // MAX_THREADS stacks, each above a guard page
    size_t region_bytes = 0;
    char* stack_lo[MAX_THREADS]; // lowest usable byte of each stack
    // stacks not in use by a started, unfinished fiber (LIFO: the stack a
    // fiber leaves is the next one started, still in cache)
    unsigned free_stacks[MAX_THREADS];
    unsigned nfree = 0;
    Fiber fibers[MAX_THREADS];
    unsigned nthreads = 0;
    Fiber* cur = nullptr;
    // FIFO of ready fibers (each at most once)
    unsigned queue[MAX_THREADS];
    unsigned qhead = 0, qlen = 0;
    unsigned done = 0;
    // block barrier
    unsigned bar_count = 0;
    const char* bar_file = nullptr;
    int bar_line = 0, bar_op = 0, bar_acc = 0, bar_result = 0;
    // lanes arrived at a collective, per warp
    unsigned warp_arrived[MAX_THREADS / 32];
    // the lanes' values of each warp's last EMU_GATHER
    unsigned long long warp_snap[MAX_THREADS / 32][32];
    // the launch
    void (*tramp)(void* const*) = nullptr;
    void* const* params = nullptr;
    unsigned char* dyn = nullptr;
    size_t dyn_cap = 0;
    // the emulated compute capability, read once when the launch starts
    // (so every lane of a launch takes the same path when another thread
    // changes it meanwhile)
    int arch = 900;
    Failure failure = OK;
    char msg[1024];
    unsigned long long switches = 0;

    ~Sched() {
        if (region) {
            munmap(region, region_bytes);
        }
        free(dyn);
    }

    void push(Fiber* f) {
        queue[(qhead + qlen) % MAX_THREADS] = (unsigned)(f - fibers);
        qlen++;
    }
    Fiber* pop() {
        if (qlen == 0) {
            return nullptr;
        }
        Fiber* f = &fibers[queue[qhead]];
        qhead = (qhead + 1) % MAX_THREADS;
        qlen--;
        return f;
    }
    char* stack_top(unsigned i) { return stack_lo[i] + STACK_BYTES; }
};

struct SchedHolder {
    Sched* s = nullptr;
    ~SchedHolder() { delete s; }
};

thread_local SchedHolder tls_sched;
__thread Sched* cur_sched = nullptr;

Sched* get_sched() {
    if (!tls_sched.s) {
        Sched* s = new (std::nothrow) Sched();
        if (!s) {
            return nullptr;
        }
        long page = sysconf(_SC_PAGESIZE);
        size_t slot = STACK_BYTES + (size_t)page;
        s->region_bytes = slot * MAX_THREADS;
        void* m = mmap(nullptr, s->region_bytes, PROT_READ | PROT_WRITE,
                       MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
        if (m == MAP_FAILED) {
            delete s;
            return nullptr;
        }
        s->region = (char*)m;
        for (unsigned i = 0; i < MAX_THREADS; i++) {
            char* base = s->region + i * slot;
            mprotect(base, (size_t)page, PROT_NONE); // guard page (best effort)
            s->stack_lo[i] = base + page;
        }
        tls_sched.s = s;
    }
    return tls_sched.s;
}

// -------------------------------------------------------------- switching

// Make `f` current (its threadIdx visible to the kernel code).
inline void enter(Sched* s, Fiber* f) {
    s->cur = f;
    threadIdx = f->tid;
    s->switches++;
}

#ifdef EMU_ASM_SWITCH
// Suspend the running context into `save` and run `to`.
void transfer(Sched* s, Ctx* save, Fiber* to) {
    enter(s, to);
    if (to->started) {
        emu_ctx_switch(&save->sp, to->ctx.sp);
    } else {
        to->started = true;
        to->stack = s->free_stacks[--s->nfree];
        emu_ctx_switch_start(&save->sp, s->stack_top(to->stack));
    }
}

// Leave an exited fiber (whose stack is already free) for `to`, or for the
// launch loop when `to` is null.
[[noreturn]] void transfer_exit(Sched* s, Fiber* to) {
    if (!to) {
        s->cur = nullptr;
        s->switches++;
        emu_ctx_jump(s->sched_ctx.sp);
    }
    enter(s, to);
    if (to->started) {
        emu_ctx_jump(to->ctx.sp);
    }
    to->started = true;
    to->stack = s->free_stacks[--s->nfree];
    emu_ctx_jump_start(s->stack_top(to->stack));
}

void release_stack(Sched* s, Fiber* f) { s->free_stacks[s->nfree++] = f->stack; }

void prepare_fiber(Sched*, Fiber* f) { f->started = false; }

inline void to_sched(Sched* s, Fiber* from) {
    s->cur = nullptr;
    s->switches++;
    emu_ctx_switch(&from->ctx.sp, s->sched_ctx.sp);
}
#else
void transfer(Sched* s, Ctx* save, Fiber* to) {
    enter(s, to);
    swapcontext(&save->uc, &to->ctx.uc);
}

[[noreturn]] void transfer_exit(Sched* s, Fiber* to) {
    if (!to) {
        s->cur = nullptr;
        s->switches++;
        setcontext(&s->sched_ctx.uc);
    } else {
        enter(s, to);
        setcontext(&to->ctx.uc);
    }
    abort(); // setcontext does not return
}

// ucontext fibers keep their stack until the block ends: makecontext would
// write into the stack the exiting fiber still runs on.
void release_stack(Sched*, Fiber*) {}

void prepare_fiber(Sched* s, Fiber* f) {
    f->started = true;
    f->stack = (unsigned)(f - s->fibers);
    getcontext(&f->ctx.uc);
    f->ctx.uc.uc_stack.ss_sp = s->stack_lo[f->stack];
    f->ctx.uc.uc_stack.ss_size = STACK_BYTES;
    f->ctx.uc.uc_link = nullptr;
    makecontext(&f->ctx.uc, emu_fiber_main, 0);
}

inline void to_sched(Sched* s, Fiber* from) {
    s->cur = nullptr;
    s->switches++;
    swapcontext(&from->ctx.uc, &s->sched_ctx.uc);
}
#endif

// The current fiber waits: run the next ready fiber, or return to the
// launch loop when none is ready. Returns when resumed.
void suspend(Sched* s, Fiber* self) {
    Fiber* next = s->pop();
    if (next) {
        transfer(s, &self->ctx, next);
    } else {
        to_sched(s, self);
    }
}

// Stop the launch with `kind` (the message is already in s->msg); never
// returns.
[[noreturn]] void fail(Sched* s, Fiber* self, Failure kind) {
    s->failure = kind;
    self->state = DONE; // never resumed
    to_sched(s, self);
    abort(); // unreachable: the launch loop never resumes a failed fiber
}

[[noreturn]] void fiber_body() {
    Sched* s = cur_sched;
    s->tramp(s->params);
    Fiber* self = s->cur;
    self->state = DONE;
    s->done++;
    release_stack(s, self);
    transfer_exit(s, s->pop());
}

// ---------------------------------------------------- block barrier

int syncthreads(Sched* s, Fiber* f, const char* file, int line, int op, int pred) {
    if (s->bar_count == 0) {
        s->bar_file = file;
        s->bar_line = line;
        s->bar_op = op;
        s->bar_acc = op == EMU_BAR_AND ? 1 : 0;
    } else if (s->bar_line != line || s->bar_op != op ||
               (s->bar_file != file && strcmp(s->bar_file, file) != 0)) {
        snprintf(s->msg, sizeof s->msg,
                 "divergent __syncthreads in block (%u,%u,%u): thread (%u,%u,%u) waits at "
                 "%s:%d while %u other thread(s) wait at %s:%d (on a GPU this hangs or "
                 "corrupts the barrier)",
                 blockIdx.x, blockIdx.y, blockIdx.z, f->tid.x, f->tid.y, f->tid.z, file, line,
                 s->bar_count, s->bar_file, s->bar_line);
        fail(s, f, DEADLOCK);
    }
    switch (op) {
    case EMU_BAR_COUNT: s->bar_acc += pred; break;
    case EMU_BAR_AND: s->bar_acc &= pred; break;
    case EMU_BAR_OR: s->bar_acc |= pred; break;
    default: break;
    }
    s->bar_count++;
    if (s->bar_count == s->nthreads) {
        // the last arrival releases everyone and goes on
        s->bar_result = s->bar_acc;
        s->bar_count = 0;
        for (unsigned i = 0; i < s->nthreads; i++) {
            if (s->fibers[i].state == WAIT_BAR) {
                s->fibers[i].state = READY;
                s->push(&s->fibers[i]);
            }
        }
        return s->bar_result;
    }
    f->state = WAIT_BAR;
    suspend(s, f);
    return s->bar_result;
}

// ---------------------------------------------------- warp collectives

// One row half of mma.sync.aligned.m16n8k16.row.col.s32.s8.s8.s32 of the
// whole warp, for lane l: lane 4g + q holds A[g][4q..4q+3] (low word of
// its value) and A[g + 8][4q..4q+3] (high word), and B[4q..4q+3][g] (its
// arg); lane (g, t) gets C[row][2t] and C[row][2t + 1], row g (low half) or
// g + 8 (high half), packed low / high.
unsigned long long mma_s8_half(const Fiber* base, unsigned l, bool hi) {
    unsigned g = l >> 2;
    unsigned t = l & 3;
    unsigned r[2];
    for (unsigned j = 0; j < 2; j++) {
        unsigned n = 2 * t + j;
        int acc = 0;
        for (unsigned q = 0; q < 4; q++) {
            unsigned long long av = base[4 * g + q].wval;
            unsigned a = hi ? (unsigned)(av >> 32) : (unsigned)av;
            unsigned b = (unsigned)base[4 * n + q].warg;
            for (int i = 0; i < 4; i++) {
                acc += (int)(signed char)(a >> (8 * i)) * (int)(signed char)(b >> (8 * i));
            }
        }
        r[j] = (unsigned)acc;
    }
    return (unsigned long long)r[0] | ((unsigned long long)r[1] << 32);
}

// This lane's result once every lane of the mask has arrived.
unsigned long long warp_result(Fiber* base, unsigned mask, unsigned l) {
    const Fiber& me = base[l];
    int w = me.wwidth;
    unsigned seg = l & ~(unsigned)(w - 1); // first lane of this lane's segment
    unsigned src = l;
    switch (me.wkind) {
    case EMU_SHFL_IDX: src = seg + ((unsigned)me.warg & (unsigned)(w - 1)); break;
    case EMU_SHFL_UP:
        src = (l - seg) < (unsigned)me.warg ? l : l - (unsigned)me.warg;
        break;
    case EMU_SHFL_DOWN:
        src = (l - seg) + (unsigned)me.warg >= (unsigned)w ? l : l + (unsigned)me.warg;
        break;
    case EMU_SHFL_XOR:
        src = l ^ (unsigned)me.warg;
        if (src >= seg + (unsigned)w) {
            src = l; // later segments are not readable: own value
        }
        break;
    case EMU_BALLOT:
    case EMU_ALL:
    case EMU_ANY: {
        unsigned ballot = 0;
        for (unsigned k = 0; k < 32; k++) {
            if ((mask >> k) & 1u) {
                ballot |= (base[k].wval != 0 ? 1u : 0u) << k;
            }
        }
        if (me.wkind == EMU_BALLOT) {
            return ballot;
        }
        if (me.wkind == EMU_ALL) {
            return ballot == mask ? 1 : 0;
        }
        return ballot != 0 ? 1 : 0;
    }
    case EMU_REDUCE_ADD:
    case EMU_REDUCE_MIN:
    case EMU_REDUCE_MAX:
    case EMU_REDUCE_AND:
    case EMU_REDUCE_OR:
    case EMU_REDUCE_XOR: {
        // 32-bit values; arg 1 compares them as signed
        bool sgn = me.warg != 0;
        unsigned r = 0;
        bool first = true;
        for (unsigned k = 0; k < 32; k++) {
            if (!((mask >> k) & 1u)) {
                continue;
            }
            unsigned v = (unsigned)base[k].wval;
            if (first) {
                r = v;
                first = false;
                continue;
            }
            bool less = sgn ? (int)v < (int)r : v < r;
            switch (me.wkind) {
            case EMU_REDUCE_ADD: r += v; break;
            case EMU_REDUCE_MIN: r = less ? v : r; break;
            case EMU_REDUCE_MAX: r = (!less && v != r) ? v : r; break;
            case EMU_REDUCE_AND: r &= v; break;
            case EMU_REDUCE_OR: r |= v; break;
            default: r ^= v; break;
            }
        }
        return r;
    }
    default: return 0;
    }
    // a source lane outside the mask is undefined on a GPU: own value here
    if (src >= 32 || !((mask >> src) & 1u)) {
        src = l;
    }
    return base[src].wval;
}

unsigned long long warp_op(Sched* s, Fiber* f, int kind, unsigned mask, unsigned long long val,
                           int arg, int width) {
    unsigned bit = 1u << f->lane;
    if (!(mask & bit)) {
        snprintf(s->msg, sizeof s->msg,
                 "thread (%u,%u,%u) of block (%u,%u,%u) (warp %u lane %u) calls %s with mask "
                 "%#010x, which does not name its own lane",
                 f->tid.x, f->tid.y, f->tid.z, blockIdx.x, blockIdx.y, blockIdx.z, f->warp,
                 f->lane, warp_op_name(kind), mask);
        fail(s, f, MISUSE);
    }
    if (width <= 0 || width > 32 || (width & (width - 1)) != 0) {
        snprintf(s->msg, sizeof s->msg, "%s with width %d (must be a power of 2 up to 32)",
                 warp_op_name(kind), width);
        fail(s, f, MISUSE);
    }
    f->wkind = kind;
    f->wmask = mask;
    f->wval = val;
    f->warg = arg;
    f->wwidth = width;
    unsigned& arrived = s->warp_arrived[f->warp];
    arrived |= bit;
    if ((arrived & mask) != mask) {
        f->state = WAIT_WARP;
        suspend(s, f);
        return f->wresult;
    }
    // the last lane of the mask: check everyone is in the same operation,
    // compute every lane's result, release the others
    Fiber* base = &s->fibers[f->warp * 32];
    for (unsigned m = mask; m != 0; m &= m - 1) {
        unsigned l = (unsigned)__builtin_ctz(m);
        if (base[l].wkind != kind || base[l].wmask != mask) {
            snprintf(s->msg, sizeof s->msg,
                     "warp %u of block (%u,%u,%u): lane %u is in %s with mask %#010x while "
                     "lane %u is in %s with mask %#010x (divergent warp collective)",
                     f->warp, blockIdx.x, blockIdx.y, blockIdx.z, f->lane, warp_op_name(kind),
                     mask, l, warp_op_name(base[l].wkind), base[l].wmask);
            fail(s, f, DEADLOCK);
        }
    }
    arrived &= ~mask;
    if (kind == EMU_GATHER || kind == EMU_MMA_S8 || kind == EMU_WARP_CALL) {
        if (mask != 0xffffffffu || width != 32) {
            snprintf(s->msg, sizeof s->msg,
                     "warp %u of block (%u,%u,%u): %s with mask %#010x width %d (the whole "
                     "warp must take part)",
                     f->warp, blockIdx.x, blockIdx.y, blockIdx.z, warp_op_name(kind), mask,
                     width);
            fail(s, f, MISUSE);
        }
    }
    if (kind == EMU_WARP_CALL) {
        // every lane's operand block (its first member the function): the
        // last lane runs the instruction for the whole warp while the others
        // wait, their stacks (and so their operand blocks) intact
        void* lanes[32];
        for (unsigned l = 0; l < 32; l++) {
            lanes[l] = (void*)(uintptr_t)base[l].wval;
        }
        EmuWarpFn fn = ((const EmuWarpCallHead*)lanes[0])->fn;
        for (unsigned l = 1; l < 32; l++) {
            if (((const EmuWarpCallHead*)lanes[l])->fn != fn) {
                snprintf(s->msg, sizeof s->msg,
                         "warp %u of block (%u,%u,%u): lanes 0 and %u are in different "
                         "warp-wide instructions (divergent warp collective)",
                         f->warp, blockIdx.x, blockIdx.y, blockIdx.z, l);
                fail(s, f, DEADLOCK);
            }
        }
        fn(lanes);
    }
    unsigned long long* snap = s->warp_snap[f->warp];
    if (kind == EMU_GATHER) {
        // every lane's value, kept until the warp's next collective
        // completes (no lane of the warp can be in it before reading this)
        for (unsigned l = 0; l < 32; l++) {
            snap[l] = base[l].wval;
        }
    }
    for (unsigned m = mask; m != 0; m &= m - 1) {
        unsigned l = (unsigned)__builtin_ctz(m);
        Fiber& g = base[l];
        if (kind == EMU_MMA_S8) {
            g.wresult = mma_s8_half(base, l, false);
            g.wresult2 = mma_s8_half(base, l, true);
        } else if (kind == EMU_GATHER) {
            g.wresult = (unsigned long long)(uintptr_t)snap;
        } else if (kind == EMU_WARP_CALL) {
            g.wresult = 0;
        } else {
            g.wresult = warp_result(base, mask, l);
        }
        g.conv_mask = mask;
        if (l != f->lane) {
            g.state = READY;
            s->push(&g);
        }
    }
    return f->wresult;
}

// Describe why no thread of the block can run.
void describe_deadlock(Sched* s) {
    unsigned at_bar = 0, exited = s->done, in_warp = 0;
    Fiber* first_warp = nullptr;
    for (unsigned i = 0; i < s->nthreads; i++) {
        Fiber& f = s->fibers[i];
        if (f.state == WAIT_BAR) {
            at_bar++;
        } else if (f.state == WAIT_WARP) {
            in_warp++;
            if (!first_warp) {
                first_warp = &f;
            }
        }
    }
    int n = snprintf(s->msg, sizeof s->msg,
                     "deadlock in block (%u,%u,%u) of %u threads: %u exited, %u wait at "
                     "__syncthreads",
                     blockIdx.x, blockIdx.y, blockIdx.z, s->nthreads, exited, at_bar);
    if (at_bar > 0 && n > 0 && (size_t)n < sizeof s->msg) {
        n += snprintf(s->msg + n, sizeof s->msg - (size_t)n, " (%s:%d)", s->bar_file,
                      s->bar_line);
    }
    if (n > 0 && (size_t)n < sizeof s->msg) {
        n += snprintf(s->msg + n, sizeof s->msg - (size_t)n, ", %u wait in warp collectives",
                      in_warp);
    }
    if (first_warp && n > 0 && (size_t)n < sizeof s->msg) {
        unsigned warp_lanes = s->nthreads - first_warp->warp * 32;
        unsigned exists = warp_lanes >= 32 ? 0xffffffffu : ((1u << warp_lanes) - 1u);
        unsigned missing = first_warp->wmask & ~s->warp_arrived[first_warp->warp];
        n += snprintf(s->msg + n, sizeof s->msg - (size_t)n,
                      "; e.g. warp %u lane %u waits in %s(mask %#010x) for lanes %#010x%s",
                      first_warp->warp, first_warp->lane, warp_op_name(first_warp->wkind),
                      first_warp->wmask, missing,
                      (missing & ~exists) ? " (some of which do not exist in this block)" : "");
    }
    if (n > 0 && (size_t)n < sizeof s->msg) {
        snprintf(s->msg + n, sizeof s->msg - (size_t)n,
                 "; a barrier not reached by every thread it waits for hangs a GPU");
    }
}

} // namespace

// ------------------------------------------------------------------ ABI

extern "C" void emu_fiber_main() { fiber_body(); }

extern "C" int emu_syncthreads_op(const char* file, int line, int op, int pred) {
    Sched* s = cur_sched;
    return syncthreads(s, s->cur, file, line, op, pred);
}

extern "C" unsigned long long emu_warp_op(int kind, unsigned mask, unsigned long long val,
                                          int arg, int width) {
    Sched* s = cur_sched;
    return warp_op(s, s->cur, kind, mask, val, arg, width);
}

extern "C" unsigned emu_activemask(void) { return cur_sched->cur->conv_mask; }

extern "C" unsigned long long emu_warp_result2(void) { return cur_sched->cur->wresult2; }

extern "C" void* emu_dynamic_shared(void) { return cur_sched->dyn; }

namespace {
std::atomic<int> g_arch{900};
}

// Inside a kernel: the arch its launch started with; outside: the setting.
extern "C" int emu_arch(void) {
    return cur_sched ? cur_sched->arch : g_arch.load(std::memory_order_relaxed);
}

extern "C" void emu_set_arch(int arch) { g_arch.store(arch, std::memory_order_relaxed); }

extern "C" void emu_cp_async(void* dst, const void* src, unsigned bytes) {
    Sched* s = cur_sched;
    Fiber* f = s->cur;
    if (bytes != 4 && bytes != 8 && bytes != 16) {
        snprintf(s->msg, sizeof s->msg, "cp.async of %u bytes (4, 8 or 16)", bytes);
        fail(s, f, MISUSE);
    }
    if ((((uintptr_t)dst | (uintptr_t)src) & (bytes - 1)) != 0) {
        snprintf(s->msg, sizeof s->msg,
                 "cp.async of %u bytes from %p to %p: both addresses must be aligned to the "
                 "size (thread (%u,%u,%u) of block (%u,%u,%u))",
                 bytes, src, dst, f->tid.x, f->tid.y, f->tid.z, blockIdx.x, blockIdx.y,
                 blockIdx.z);
        fail(s, f, MISUSE);
    }
    if (f->ncp == CP_ASYNC_MAX) {
        snprintf(s->msg, sizeof s->msg,
                 "more than %u cp.async copies pending in thread (%u,%u,%u) of block "
                 "(%u,%u,%u) (no cp.async.wait_group)",
                 CP_ASYNC_MAX, f->tid.x, f->tid.y, f->tid.z, blockIdx.x, blockIdx.y,
                 blockIdx.z);
        fail(s, f, MISUSE);
    }
    // undefined until waited for: a read before the wait sees poison
    memset(dst, 0xA5, bytes);
    f->cp[f->ncp++] = CpAsync{dst, src, bytes, f->cp_groups};
}

extern "C" void emu_cp_async_commit(void) { cur_sched->cur->cp_groups++; }

extern "C" void emu_cp_async_wait(unsigned pending) {
    Fiber* f = cur_sched->cur;
    // complete every copy of the groups older than the newest `pending`
    // committed ones; the uncommitted copies and the newer groups stay
    unsigned keep_from = f->cp_groups > pending ? f->cp_groups - pending : 0;
    unsigned n = 0;
    for (unsigned i = 0; i < f->ncp; i++) {
        CpAsync& c = f->cp[i];
        if (c.group < keep_from) {
            memcpy(c.dst, c.src, c.bytes);
        } else {
            f->cp[n++] = c;
        }
    }
    f->ncp = n;
}

// Context switches made on the calling OS thread so far.
extern "C" unsigned long long emu_context_switches(void) {
    return tls_sched.s ? tls_sched.s->switches : 0;
}

// Run a whole launch on the calling thread. The caller has checked the
// launch limits (block <= 1024 threads, no zero dimension). Returns 0, or a
// `Failure` with a message in `err`.
extern "C" int emu_launch(void (*tramp)(void* const*), const unsigned* grid,
                          const unsigned* block, size_t dyn_bytes, void* const* params, char* err,
                          size_t err_len) {
    Sched* s = get_sched();
    if (!s) {
        snprintf(err, err_len, "cannot map fiber stacks (%zu KiB)",
                 MAX_THREADS * STACK_BYTES / 1024);
        return NO_MEMORY;
    }
    unsigned long long nthreads = (unsigned long long)block[0] * block[1] * block[2];
    if (nthreads == 0 || nthreads > MAX_THREADS) {
        snprintf(err, err_len, "%llu threads per block (1 to %u)", nthreads, MAX_THREADS);
        return MISUSE;
    }
    if (dyn_bytes > s->dyn_cap) {
        free(s->dyn);
        s->dyn = nullptr;
        s->dyn_cap = 0;
        void* p = nullptr;
        if (posix_memalign(&p, 256, dyn_bytes) != 0) {
            snprintf(err, err_len, "cannot allocate %zu bytes of dynamic shared memory",
                     dyn_bytes);
            return NO_MEMORY;
        }
        s->dyn = (unsigned char*)p;
        s->dyn_cap = dyn_bytes;
    }
    if (cur_sched == s) {
        snprintf(err, err_len, "a launch from inside a running kernel");
        return MISUSE;
    }
    cur_sched = s;
    s->arch = g_arch.load(std::memory_order_relaxed);
    s->tramp = tramp;
    s->params = params;
    s->nthreads = (unsigned)nthreads;
    s->failure = OK;
    s->msg[0] = 0;
    gridDim = dim3{grid[0], grid[1], grid[2]};
    blockDim = dim3{block[0], block[1], block[2]};
    for (unsigned i = 0; i < s->nthreads; i++) {
        Fiber& f = s->fibers[i];
        f.tid = uint3{i % block[0], (i / block[0]) % block[1], i / (block[0] * block[1])};
        f.warp = i / 32;
        f.lane = i % 32;
    }
    for (unsigned bz = 0; bz < grid[2] && s->failure == OK; bz++) {
        for (unsigned by = 0; by < grid[1] && s->failure == OK; by++) {
            for (unsigned bx = 0; bx < grid[0] && s->failure == OK; bx++) {
                blockIdx = uint3{bx, by, bz};
                s->bar_count = 0;
                s->done = 0;
                s->qhead = 0;
                s->qlen = 0;
                memset(s->warp_arrived, 0, sizeof s->warp_arrived);
                s->nfree = 0;
                for (unsigned i = s->nthreads; i-- > 0;) {
                    s->free_stacks[s->nfree++] = i;
                }
                for (unsigned i = 0; i < s->nthreads; i++) {
                    Fiber& f = s->fibers[i];
                    prepare_fiber(s, &f);
                    f.state = READY;
                    f.wkind = -1;
                    f.ncp = 0;
                    f.cp_groups = 0;
                    unsigned warp_lanes = s->nthreads - f.warp * 32;
                    f.conv_mask = warp_lanes >= 32 ? 0xffffffffu : (1u << warp_lanes) - 1u;
                    s->push(&f);
                }
                while (s->failure == OK) {
                    Fiber* f = s->pop();
                    if (!f) {
                        break;
                    }
                    transfer(s, &s->sched_ctx, f);
                }
                if (s->failure == OK && s->done != s->nthreads) {
                    describe_deadlock(s);
                    s->failure = DEADLOCK;
                }
            }
        }
    }
    cur_sched = nullptr;
    int rc = s->failure;
    if (rc != OK) {
        snprintf(err, err_len, "%s", s->msg);
    }
    return rc;
}
