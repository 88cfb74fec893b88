package aws

import (
	"context"
	"errors"
	"slices"
	"strings"

	awshttp "github.com/aws/aws-sdk-go-v2/aws/transport/http"
	"github.com/aws/smithy-go"

	"github.com/nodemgr/nodemgr/internal/base/errdefs"
	"github.com/nodemgr/nodemgr/internal/drivers/provision"
)

// ec2Error is an error EC2 answered: its code and message, without the
// SDK's transport preamble, in one of nodemgr's classes.
type ec2Error struct {
	code, msg string
	err       error // the SDK's error
	class     error
}

func (e *ec2Error) Error() string   { return e.code + ": " + e.msg }
func (e *ec2Error) Unwrap() []error { return []error{e.err, e.class} }

// Codes of EC2 errors that mean: no capacity (or quota) for this request
// now. Retrying at once does not help; another type, zone or time does.
var capacityCodes = []string{
	"InsufficientInstanceCapacity", "InsufficientHostCapacity", "InsufficientReservedInstanceCapacity",
	"InsufficientCapacity", "InsufficientFreeAddressesInSubnet", "InstanceLimitExceeded",
	"VcpuLimitExceeded", "MaxSpotInstanceCountExceeded", "SpotMaxPriceTooLow",
	"InsufficientCapacityOnHost", "SpotInstanceCountExceeded",
	// A spot request's status codes, as some answers carry them.
	"capacity-not-available", "capacity-oversubscribed", "price-too-low",
}

// noCapacity reports whether an EC2 error or state-reason code says there
// is no capacity (or quota) for the request now; state reasons are
// prefixed ("Server.InsufficientInstanceCapacity").
func noCapacity(code string) bool {
	if _, after, ok := strings.Cut(code, "."); ok {
		code = after
	}
	return slices.Contains(capacityCodes, code)
}

// errorCode returns the EC2 error code in err, if EC2 answered with one.
func errorCode(err error) string {
	var ae smithy.APIError
	if errors.As(err, &ae) {
		return ae.ErrorCode()
	}
	return ""
}

// classify gives an SDK error its class: what EC2 says is missing is not
// found, what it refuses as malformed is invalid, a wrong state is a
// conflict, no capacity or an unreachable endpoint unavailable, and a
// refused credential permission. A cancelled or timed-out context is kept
// as it is.
func classify(err error) error {
	if err == nil {
		return nil
	}
	var ae smithy.APIError
	if !errors.As(err, &ae) {
		if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
			return err
		}
		// No answer from EC2: the endpoint is down or unreachable.
		return errdefs.Class(err, errdefs.ErrUnavailable)
	}
	code := ae.ErrorCode()
	class := errdefs.ErrInvalid
	switch {
	case strings.HasSuffix(code, ".NotFound"), code == "InvalidAMIID.Unavailable":
		class = errdefs.ErrNotFound
	case strings.HasPrefix(code, "IncorrectInstanceState"), code == "IncorrectState",
		code == "IdempotentParameterMismatch", strings.HasPrefix(code, "OperationNotPermitted"):
		class = errdefs.ErrConflict
	case slices.Contains(capacityCodes, code):
		class = provision.ErrNoCapacity // errdefs.ErrUnavailable too
	case code == "RequestLimitExceeded", code == "Unavailable",
		code == "ServiceUnavailable", code == "InternalError", code == "InternalFailure",
		ae.ErrorFault() == smithy.FaultServer, httpStatus(err) >= 500:
		class = errdefs.ErrUnavailable
	case code == "UnauthorizedOperation", code == "AuthFailure", code == "Blocked", code == "OptInRequired",
		code == "PendingVerification", strings.HasPrefix(code, "InvalidClientTokenId"), code == "SignatureDoesNotMatch":
		class = errdefs.ErrPermission
	}
	return &ec2Error{code: code, msg: ae.ErrorMessage(), err: err, class: class}
}

// httpStatus is the HTTP status of EC2's answer, 0 if there was none.
func httpStatus(err error) int {
	var re *awshttp.ResponseError
	if errors.As(err, &re) {
		return re.HTTPStatusCode()
	}
	return 0
}
