package session

import (
	"context"
	"fmt"
	"time"
)

// Mirrors: a replica with readers of a session whose prompt runs
// elsewhere follows the stored event stream into its own copy of the log
// (EventStream).

// How often a replica with readers of a session it does not run checks the
// stored log even without a notification (one can be lost while the pub/sub
// connection reconnects): often while a prompt is under way (its last
// event seen here is not a prompt_end), rarely when the session is idle (a
// new prompt's next notification catches up anyway).
const (
	mirrorPoll     = 2 * time.Second
	mirrorIdlePoll = 30 * time.Second
)

// subscribeShared brings this replica's copy of the log up to date, fills in
// older events when the reader wants them, and keeps the copy fed.
func (s *Session) subscribeShared(ctx context.Context, after uint64) (*Subscription, error) {
	s.mu.Lock()
	running, stored := s.running, s.storedSeq
	s.mu.Unlock()
	// stored is the newest seq the store held when the session was last
	// looked up (Get, just before): the copy pulls when it is behind, or
	// ahead (a failover lost events it holds: the pull takes it back to
	// the stored log before the reader reads it).
	if !running && s.log.lastSeq() != stored {
		if s.log.lastSeq() == 0 && after > 0 && after <= stored {
			// A first reader from the middle: no need for what came before.
			s.log.jump(after + 1)
		}
		if err := s.pull(ctx); err != nil {
			return nil, unavailable("read events", err)
		}
	}
	if oldest := s.log.oldest(); after+1 < oldest {
		n := min(oldest-1-after, uint64(s.m.opts.EventBuffer))
		evs, err := s.m.events.Events(ctx, s.id, oldest-1-n, int(n))
		if err != nil {
			return nil, unavailable("read events", err)
		}
		s.log.prepend(evs)
	}
	sub, err := s.log.subscribe(after)
	if err != nil {
		return nil, err
	}
	s.startMirror()
	return sub, nil
}

// pull applies the stored events after the copy's newest one. It reads
// that one again, which must still be the store's: a failover can lose
// events the old master confirmed (its replica never had them), and the
// replica that takes the prompt over stores others at their seqs. A copy
// holding such events goes back to the newest event the store holds the
// same, and its readers resume from there (*ResumeError), wherever they
// like; else they would wait for events the store has under other seqs.
func (s *Session) pull(ctx context.Context) error {
	s.pullMu.Lock()
	defer s.pullMu.Unlock()
	const batch = 512
	rewound := false
	for {
		if !s.log.taking() {
			// Closed, or its resume point is being checked (checkStored).
			return nil
		}
		newest, held, own := s.log.newest()
		if own {
			// A prompt of this replica's publishes (one that started
			// while this pull was under way): what the store lacks of it
			// is on its way there, not lost, and there is nothing to
			// mirror. The pull after the prompt reads what is new then.
			return nil
		}
		after := s.log.lastSeq()
		if held {
			after = newest.seq - 1
		}
		evs, err := s.m.events.Events(ctx, s.id, after, batch)
		if err != nil {
			return err
		}
		n := len(evs)
		if held {
			switch {
			case n > 0 && evs[0].Seq > newest.seq:
				// Trimmed past it (the store keeps a bounded stream):
				// the gap moves the copy on (apply).
			case n == 0 || !newest.is(&evs[0]):
				if n == 0 {
					if _, found, err := s.m.store.Load(ctx, s.id); err != nil || !found {
						// Deleted (its notification ends the copy's
						// readers), or the store fails: no verdict.
						return err
					}
				}
				if rewound {
					return fmt.Errorf("the stored log of %s changed under the copy twice in one pull", s.id)
				}
				rewound = true
				at, err := s.storedPoint(ctx)
				if err != nil {
					return err
				}
				at = s.log.fenceAt(at, false)
				s.log.unfence()
				s.m.log.Warn("this replica's copy of the session's events holds events the store lost: it goes back to the stored log, and its readers resume from there",
					"session", s.id, "seq", at)
				continue
			default:
				evs = evs[1:]
			}
		}
		s.log.apply(evs)
		if n < batch {
			return nil
		}
	}
}

// startMirror makes this replica's copy of the log follow the stored one
// while it has readers: no goroutine of its own while nothing happens. A
// notification (events stored by another replica) starts a pull, the
// manager's poller pulls in case one was lost (every mirrorPoll while a
// prompt is under way, every mirrorIdlePoll otherwise) and stops following
// once the last reader left.
func (s *Session) startMirror() {
	s.mu.Lock()
	if s.following {
		s.mu.Unlock()
		return
	}
	s.following = true
	s.lastPull = time.Now()
	s.mu.Unlock()
	stop := s.m.events.Follow(s.id, s.notified)
	s.mu.Lock()
	if s.following {
		s.stopFollow = stop
		stop = nil
	}
	s.mu.Unlock()
	if stop != nil {
		// Removed meanwhile.
		stop()
		return
	}
	s.m.mu.Lock()
	s.m.followed[s] = struct{}{}
	s.m.mu.Unlock()
	if !s.m.ownStore {
		// Events another replica stored between the copy's last read and
		// the subscription's confirmation were announced to nobody here:
		// read them now, not at the poller's next round (up to mirrorPoll
		// late for a reader that came as a prompt started elsewhere).
		s.mu.Lock()
		s.pullLocked()
		s.mu.Unlock()
	}
}

// notified is the store's notification: events stored by another replica,
// or the session removed by one.
func (s *Session) notified(removed bool) {
	if !removed {
		s.mu.Lock()
		s.pullLocked()
		s.mu.Unlock()
		return
	}
	go func() {
		s.stopFollowing(nil)
		s.m.forget(s)
	}()
}

// pullLocked starts a pull into the copy of the log, or has the one under
// way go round again: not while the prompt runs here (the log is the
// store's source then).
func (s *Session) pullLocked() {
	if !s.following || s.running || s.checking {
		return
	}
	if s.pulling {
		s.pullAgain = true
		return
	}
	// Close, which waits for the pulls, either sees this one or it does
	// not start. (The pull takes s.mu, held here, once it has run.)
	s.pulling = s.m.goBackground(func() {
		for {
			ctx, cancel := context.WithTimeout(s.m.baseCtx, s.m.leaseTTL())
			if err := s.pull(ctx); err != nil && s.m.baseCtx.Err() == nil {
				s.m.log.Warn("events of another replica not read", "session", s.id, "err", err)
			}
			cancel()
			s.mu.Lock()
			s.lastPull = time.Now()
			if !s.pullAgain || s.running || s.m.baseCtx.Err() != nil {
				s.pulling, s.pullAgain = false, false
				s.mu.Unlock()
				return
			}
			s.pullAgain = false
			s.mu.Unlock()
		}
	})
}

// stopFollowing ends the copy's following of the stored log, when only is
// nil or is its stop function.
func (s *Session) stopFollowing(only func()) {
	s.mu.Lock()
	stop := s.stopFollow
	s.following, s.stopFollow = false, nil
	s.mu.Unlock()
	s.m.mu.Lock()
	delete(s.m.followed, s)
	s.m.followed = shrunk(s.m.followed, &s.m.followedPeak)
	s.m.mu.Unlock()
	if stop != nil {
		stop()
	}
}

// pollMirrors is the manager's poller of the copies that follow a stored
// log: it pulls what a lost notification would have announced, and stops
// following for copies without readers.
func (m *Manager) pollMirrors() {
	t := time.NewTicker(mirrorPoll)
	defer t.Stop()
	var ss []*Session
	for {
		select {
		case <-m.baseCtx.Done():
			return
		case <-t.C:
		}
		ss = ss[:0]
		m.mu.RLock()
		for s := range m.followed {
			ss = append(ss, s)
		}
		m.mu.RUnlock()
		for _, s := range ss {
			s.mu.Lock()
			switch {
			case !s.following || s.stopFollow == nil:
				// Starting, or stopped.
			case s.log.subscribers() == 0:
				s.mu.Unlock()
				s.stopFollowing(nil)
				continue
			case s.log.lastType() != EventPromptEnd || time.Since(s.lastPull) >= mirrorIdlePoll:
				s.pullLocked()
			}
			s.mu.Unlock()
		}
		// The array is kept for the next round: not the sessions in it,
		// which would stay in memory, deleted or not, until a round as
		// long overwrote them.
		clear(ss)
	}
}

// kickMirrorLocked pulls into a following copy after a prompt of this
// replica's ended: notifications that came while it ran were skipped.
func (s *Session) kickMirrorLocked() {
	s.pullLocked()
}
