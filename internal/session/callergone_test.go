package session_test

import (
	"context"
	"testing"
	"testing/synctest"

	"github.com/agentd/agentd/internal/retry"
	"github.com/agentd/agentd/internal/session"
)

// CallerGone aborts the prompt it names, in its backoff, with the final
// error "caller disconnected"; for another prompt id, or once the prompt
// has ended, it does nothing.
func TestCallerGoneAbortsItsPrompt(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		m := newManager(t, retry.DefaultSettings(), 1)
		s := create(t, m, session.RetryOverrides{})
		id, sub, err := s.Prompt(context.Background(), "[[faults: 529,529,529,ok]]")
		if err != nil {
			t.Fatal(err)
		}
		defer sub.Close()
		waitFor(t, sub, session.EventAutoRetryStart)
		s.CallerGone("prm_someotherprompt")
		synctest.Wait()
		if !s.State().IsRetrying {
			t.Fatal("CallerGone for another prompt ended this one")
		}
		s.CallerGone(id)
		evs := readUntilEnd(t, sub)
		end := only(evs, session.EventAutoRetryEnd)
		if len(end) != 1 || end[0].Success || end[0].FinalError != "caller disconnected" {
			t.Fatalf("auto_retry_end = %+v (%s)", end, kinds(evs))
		}
		if pe := last(evs); pe.Outcome != session.OutcomeAborted || pe.Error != "caller disconnected" || pe.PromptID != id {
			t.Fatalf("prompt_end = %+v", pe)
		}
		// Ended: a late CallerGone leaves the next prompt alone.
		id2, sub2, err := s.Prompt(context.Background(), "hello")
		if err != nil {
			t.Fatal(err)
		}
		defer sub2.Close()
		s.CallerGone(id)
		if pe := last(readUntilEnd(t, sub2)); pe.Outcome != session.OutcomeCompleted || pe.PromptID != id2 {
			t.Fatalf("next prompt_end = %+v", pe)
		}
	})
}
