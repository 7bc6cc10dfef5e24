package wire

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"sync"
)

// maxLine is the longest server-sent event line accepted.
const maxLine = 16 << 20

// Event is one dispatched server-sent event.
type Event struct {
	Type string // the event: field; "" when the event has none
	// Data is the data: lines joined by "\n". It is valid until the next
	// event is read (the reader reuses its buffer): a handler copies what
	// it keeps.
	Data []byte
}

// sseReader reads server-sent events (text/event-stream) with a bounded
// line length. It reads nothing ahead of the event it returns but what
// bufio buffers, and starts no goroutine.
type sseReader struct {
	r    *bufio.Reader
	line []byte
	// typ is the last event type read: a stream repeats a few types (one
	// per delta), which are then not copied anew for every event.
	typ string
	// data is the buffer of the events' data, reused (unless an event made
	// it larger than maxKeptData).
	data []byte
}

// maxKeptData bounds the data buffer an sseReader keeps between events.
const maxKeptData = 64 << 10

// sseReaders are the readers of ended streams, with their buffers: a
// stream per prompt, whose 8 KiB buffer (and the line and data buffers
// grown to its events) is not allocated and zeroed anew for every prompt.
var sseReaders = sync.Pool{New: func() any { return &sseReader{r: bufio.NewReaderSize(nil, readBuffer)} }}

// readBuffer is the size of an sseReader's read buffer. A line longer than
// it is read in parts (into line), so it bounds only how much one read of
// the body takes: net/http's own buffer under it is 4 KiB.
const readBuffer = 8 << 10

// newSSEReader returns a reader of r's events, to release when the
// stream's events are no longer used.
func newSSEReader(r io.Reader) *sseReader {
	s := sseReaders.Get().(*sseReader)
	s.r.Reset(r)
	return s
}

// release gives the reader back for another stream: nothing of its events
// may be used after it.
func (s *sseReader) release() {
	s.reset()
	sseReaders.Put(s)
}

// reset empties the reader of its stream, dropping buffers grown past
// maxKeptData.
func (s *sseReader) reset() {
	s.r.Reset(nil)
	if cap(s.line) > maxKeptData {
		s.line = nil
	}
	if cap(s.data) > maxKeptData {
		s.data = nil
	}
	s.line, s.data, s.typ = s.line[:0], s.data[:0], ""
}

// next returns the next event with data. At the end of the body it returns
// io.EOF when no event was in progress, io.ErrUnexpectedEOF when one was
// cut; other errors are the body's.
func (s *sseReader) next() (Event, error) {
	var ev Event
	data := s.data[:0]
	started, hasData := false, false
	for {
		line, err := s.readLine()
		if err != nil {
			if errors.Is(err, io.EOF) && started {
				err = io.ErrUnexpectedEOF
			}
			return Event{}, err
		}
		if len(line) == 0 {
			if hasData {
				ev.Data = data
				if cap(data) <= maxKeptData {
					s.data = data
				}
				return ev, nil
			}
			ev, started = Event{}, false // an event without data is not dispatched
			continue
		}
		started = true
		if line[0] == ':' { // comment
			continue
		}
		name, value, _ := bytes.Cut(line, []byte(":"))
		value = bytes.TrimPrefix(value, []byte(" "))
		switch string(name) {
		case "event":
			if string(value) != s.typ {
				s.typ = string(value)
			}
			ev.Type = s.typ
		case "data":
			if hasData {
				data = append(data, '\n')
			}
			data = append(data, value...)
			hasData = true
		}
	}
}

// readLine returns the next line without its line ending (\n or \r\n). A
// partial line at the end of the body is io.ErrUnexpectedEOF.
func (s *sseReader) readLine() ([]byte, error) {
	s.line = s.line[:0]
	for {
		frag, err := s.r.ReadSlice('\n')
		if len(s.line)+len(frag) > maxLine {
			return nil, fmt.Errorf("server-sent event line longer than %d bytes", maxLine)
		}
		s.line = append(s.line, frag...)
		switch {
		case err == nil:
			line := s.line[:len(s.line)-1]
			return bytes.TrimSuffix(line, []byte("\r")), nil
		case errors.Is(err, bufio.ErrBufferFull):
			continue
		case errors.Is(err, io.EOF) && len(s.line) > 0:
			return nil, io.ErrUnexpectedEOF
		default:
			return nil, err
		}
	}
}
