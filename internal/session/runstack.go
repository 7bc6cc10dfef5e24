package session

// runStackBytes is a frame that, on top of the run's own at the model
// call, takes the goroutine's stack to the 32 KiB a run reaches while it
// streams (its call chain through the provider's stream, the parser and
// the delta callback to the event log). With 12 KiB the stack stopped at
// 16 KiB and grew again at the first delta.
const runStackBytes = 16 << 10

// growRunStack grows the calling goroutine's stack at once, in one copy. A
// goroutine starts with a small stack that doubles whenever a call needs
// more, and each doubling copies the stack and adjusts every frame on it:
// a run's grew on its first delta, with the provider's stream, the parser
// and the event log on the stack, which took 3.5 % of agentd's CPU at 800
// prompts/s and lay on the first delta's way to its readers. It is the
// model call's provider.Request.Answered (growStack): called once the
// provider has answered, it is on neither the request's way in (a 32 KiB
// stack comes from the heap, not the per-P cache: ≈ 19 µs there, when a
// run called it first) nor the first delta's way out. The copy costs more
// there than at the run's start (≈ 1.6 % of agentd's CPU at 300 prompts/s
// against 0.9 %: it adjusts the call's deeper frames), off the time to
// the first token. The pad is written and read at indexes the compiler
// cannot know (i), so that it keeps the array, and with it the frame's
// size.
//
//go:noinline
func growRunStack(i int) byte {
	var pad [runStackBytes]byte
	pad[i%runStackBytes] = 1
	return pad[(i+1)%runStackBytes]
}

// padIndex is growRunStack's index for growStack: a variable, so that the
// compiler does not know it.
var padIndex = 1

// growStack grows the run's stack where a model call's provider has
// answered (provider.Request.Answered; a stack grown already is left as it
// is).
func growStack() { growRunStack(padIndex) }
