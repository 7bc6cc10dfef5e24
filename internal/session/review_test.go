package session_test

import (
	"context"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/agentd/agentd/internal/provider"
	"github.com/agentd/agentd/internal/provider/sim"
	"github.com/agentd/agentd/internal/retry"
	"github.com/agentd/agentd/internal/session"
)

// A turn that failed after completing a tool call is not replayed; its tool
// call gets an error result, so the next prompt's conversation is valid.
func TestFailedToolTurnDoesNotPoisonTheSession(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		rec := &recorder{Provider: sim.New(sim.Options{})}
		m := toolManager(t, rec)
		s := createWithTools(t, m, "write_file")
		evs := prompt(t, m, s, "x [[tools: write_file]] [[faults: midstream]]")
		if last(evs).Outcome != session.OutcomeFailed {
			t.Fatalf("prompt_end = %+v", last(evs))
		}
		prompt(t, m, s, "again")
		reqs := rec.requests()
		ctx := reqs[len(reqs)-1].Messages
		// user, assistant (tool call, failed), tool (error result), user.
		if len(ctx) != 4 || ctx[1].Content[0].Type != provider.BlockToolCall || ctx[2].Role != provider.RoleTool ||
			!ctx[2].Content[0].IsError || ctx[2].Content[0].ToolCallID != ctx[1].Content[0].ToolCallID {
			t.Fatalf("next prompt's context = %+v", ctx)
		}
	})
}

// blockingCooldowns holds step 8 until released.
type blockingCooldowns struct {
	entered chan struct{}
	release chan struct{}
}

func (b *blockingCooldowns) Suppress(context.Context, string, time.Time) error {
	close(b.entered)
	<-b.release
	return nil
}

func (b *blockingCooldowns) SuppressedUntil(context.Context, string) (time.Time, error) {
	return time.Time{}, nil
}

func TestAbortRetryDuringFallbackStepCancels(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		cd := &blockingCooldowns{entered: make(chan struct{}), release: make(chan struct{})}
		m := session.NewManager(session.Options{
			Providers: []session.Provider{{Name: "sim", Kind: provider.KindSimulated, Client: sim.New(sim.Options{})}},
			Retry:     retry.DefaultSettings(), Cooldowns: cd,
		})
		defer m.Close(context.Background())
		s := create(t, m, session.RetryOverrides{})
		_, sub, err := s.Prompt(context.Background(), "[[faults: 529,ok]]")
		if err != nil {
			t.Fatal(err)
		}
		defer sub.Close()
		<-cd.entered
		if st := s.State(); st.Status != session.StatusRetrying {
			t.Fatalf("status in step 8 = %s", st.Status)
		}
		s.AbortRetry(t.Context())
		close(cd.release)
		evs := readUntilEnd(t, sub)
		if len(only(evs, session.EventAutoRetryStart)) != 0 {
			t.Fatalf("retry went ahead after AbortRetry: %s", kinds(evs))
		}
		end := only(evs, session.EventAutoRetryEnd)
		if len(end) != 1 || end[0].FinalError != "Retry cancelled" || last(evs).Outcome != session.OutcomeAborted {
			t.Fatalf("events = %s, end %+v", kinds(evs), end)
		}
	})
}

func TestRefusalMidChainClosesTheChain(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		m := newManager(t, retry.DefaultSettings(), 1)
		s := create(t, m, session.RetryOverrides{})
		evs := prompt(t, m, s, "[[faults: 503,refusal]]")
		if len(only(evs, session.EventAutoRetryStart)) != 1 {
			t.Fatalf("events = %s", kinds(evs))
		}
		end := only(evs, session.EventAutoRetryEnd)
		if len(end) != 1 || end[0].Success || end[0].Attempt != 1 {
			t.Fatalf("auto_retry_end = %+v (%s)", end, kinds(evs))
		}
	})
}

// Delete racing Prompt: either the prompt is refused, or it runs and ends
// with prompt_end; nothing keeps running after the session is gone.
func TestDeleteRacingPrompt(t *testing.T) {
	m := session.NewManager(session.Options{
		Providers: []session.Provider{{Name: "sim", Kind: provider.KindSimulated, Client: sim.New(sim.Options{})}},
		Retry:     retry.DefaultSettings(),
	})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for i := range 300 {
		s, err := m.Create(ctx, "t", session.CreateParams{Model: "sim/echo"})
		if err != nil {
			t.Fatal(err)
		}
		var wg sync.WaitGroup
		var sub *session.Subscription
		var perr error
		wg.Go(func() { _, sub, perr = s.Prompt(ctx, "hi [[faults: hang]]") })
		wg.Go(func() {
			if err := m.Delete(ctx, "t", s.ID()); err != nil {
				t.Errorf("iteration %d: Delete: %v", i, err)
			}
		})
		wg.Wait()
		if perr == nil {
			// The prompt started before the delete: it was aborted and ended.
			var ended bool
			for {
				e, err := sub.Next(ctx)
				if err != nil {
					break
				}
				ended = ended || e.Type == session.EventPromptEnd
			}
			sub.Close()
			if !ended {
				t.Fatalf("iteration %d: a prompt accepted before the delete never ended", i)
			}
		}
	}
	closeCtx, cancelClose := context.WithTimeout(ctx, 5*time.Second)
	defer cancelClose()
	if err := m.Close(closeCtx); err != nil {
		t.Fatalf("Close: %v (a run outlived its session)", err)
	}
}
