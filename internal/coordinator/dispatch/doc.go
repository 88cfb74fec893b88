// Package dispatch holds the rules by which suites' tasks reach nodes,
// apart from the sessions that carry them: a suite spec's checks and
// defaults (ValidateSuite, ValidateTask), the retry policy of a failed
// attempt, the checks of a task's files and of a reported result, which
// nodes failed to prepare a suite lately, and why a suite waits (Why:
// the dispatcher and the suite's waiting_reason ask it the same
// question, so the reason shown never disagrees with what is done).
//
// It reads the store and the server's sessions through the small
// interfaces it declares; the server's dispatcher holds the sessions,
// fair shares and claims.
package dispatch
