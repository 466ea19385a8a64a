package envd

import (
	"context"
	"errors"
	"io/fs"
	"net/http"
	"os"
	"syscall"

	"connectrpc.com/connect"

	"github.com/moatdev/moat/cmd/moat-init/internal/users"
)

// code classifies err for the client. It is the one place where error
// classes become Connect codes; httpStatus derives the REST status from it.
func code(err error) connect.Code {
	var ce *connect.Error
	switch {
	case errors.As(err, &ce):
		return ce.Code()
	case errors.Is(err, context.DeadlineExceeded), errors.Is(err, os.ErrDeadlineExceeded):
		return connect.CodeDeadlineExceeded
	case errors.Is(err, context.Canceled):
		return connect.CodeCanceled
	case errors.Is(err, users.ErrUnknown), errors.Is(err, ErrBadAuthorization),
		errors.Is(err, ErrBadSignature), errors.Is(err, ErrExpiredSignature):
		return connect.CodeUnauthenticated
	case errors.Is(err, os.ErrClosed), errors.Is(err, syscall.EPIPE):
		return connect.CodeFailedPrecondition
	case errors.Is(err, fs.ErrNotExist):
		return connect.CodeNotFound
	case errors.Is(err, fs.ErrExist):
		return connect.CodeAlreadyExists
	case errors.Is(err, fs.ErrPermission):
		return connect.CodePermissionDenied
	case errors.Is(err, syscall.ENOSPC), errors.Is(err, syscall.EDQUOT):
		return connect.CodeResourceExhausted
	case errors.Is(err, syscall.ENOTDIR), errors.Is(err, syscall.EISDIR),
		errors.Is(err, syscall.EINVAL), errors.Is(err, syscall.ENAMETOOLONG),
		errors.Is(err, syscall.ELOOP), errors.Is(err, syscall.ENOTEMPTY),
		errors.Is(err, syscall.EXDEV):
		return connect.CodeInvalidArgument
	default:
		return connect.CodeInternal
	}
}

// rpcError turns err into a Connect error with its class's code. The
// message is err's text, which names the request's own paths and users.
func rpcError(err error) error {
	if err == nil {
		return nil
	}
	var ce *connect.Error
	if errors.As(err, &ce) {
		return ce
	}
	return connect.NewError(code(err), err)
}

// httpStatus is the REST status for err.
func httpStatus(err error) int {
	switch code(err) {
	case connect.CodeNotFound:
		return http.StatusNotFound
	case connect.CodeInvalidArgument, connect.CodeAlreadyExists, connect.CodeFailedPrecondition:
		return http.StatusBadRequest
	case connect.CodeUnauthenticated:
		return http.StatusUnauthorized
	case connect.CodePermissionDenied:
		return http.StatusForbidden
	case connect.CodeResourceExhausted:
		return http.StatusInsufficientStorage
	case connect.CodeDeadlineExceeded:
		return http.StatusGatewayTimeout
	default:
		return http.StatusInternalServerError
	}
}

func invalidArgument(format string, args ...any) error {
	return connect.NewError(connect.CodeInvalidArgument, errorf(format, args...))
}

func notFound(format string, args ...any) error {
	return connect.NewError(connect.CodeNotFound, errorf(format, args...))
}

func failedPrecondition(format string, args ...any) error {
	return connect.NewError(connect.CodeFailedPrecondition, errorf(format, args...))
}
