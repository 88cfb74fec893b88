package hub

import "testing"

// TestParkingLosesNoWake: a fetch parks only if no wake came since it
// read the count before claiming; a parked fetch takes its suite's wakes
// and those for every suite, not another suite's; one fetch parks at a
// time.
func TestParkingLosesNoWake(t *testing.T) {
	s := NewSession("node-1", nil, nil)
	closed := func(ch <-chan struct{}) bool {
		select {
		case <-ch:
			return true
		default:
			return false
		}
	}

	before := s.Wakes()
	if s.wakeParked("suite-a") {
		t.Fatal("a wake with nothing parked was taken by a parked fetch: the agent would not be sent it")
	}
	if _, ok := s.Park("suite-a", before); ok {
		t.Fatal("a fetch parked although a wake came after it looked: that wake would be lost")
	}

	woken, ok := s.Park("suite-a", s.Wakes())
	if !ok {
		t.Fatal("a fetch with no wake since it looked was refused parking")
	}
	if _, again := s.Park("suite-a", s.Wakes()); again {
		t.Fatal("a second fetch parked beside the first")
	}
	if s.wakeParked("suite-b") || closed(woken) {
		t.Fatal("another suite's wake woke the parked fetch")
	}
	if !s.wakeParked("suite-a") || !closed(woken) {
		t.Fatal("the suite's wake did not reach its parked fetch")
	}
	s.Unpark(woken) // already ended by the wake: no effect
	if s.wakeParked("suite-a") {
		t.Fatal("a wake after the parked fetch was woken went to it again, not to the agent")
	}

	woken, _ = s.Park("suite-a", s.Wakes())
	if !s.wakeParked("") || !closed(woken) {
		t.Fatal("a wake for every suite did not reach the parked fetch")
	}
	woken, _ = s.Park("suite-a", s.Wakes())
	s.Unpark(woken)
	if s.wakeParked("suite-a") || closed(woken) {
		t.Fatal("a fetch that unparked was still woken")
	}
}
