package moatnode

import (
	"context"
	"fmt"
	"log/slog"
	"os"

	vklog "github.com/virtual-kubelet/virtual-kubelet/log"
)

// VKLogger adapts l to the virtual-kubelet library's logger, so the library's messages
// (pod status update errors, lease failures) reach the agent's log. Debug messages are
// dropped unless l is enabled for debug.
func VKLogger(l *slog.Logger) vklog.Logger { return vkLogger{l} }

type vkLogger struct{ l *slog.Logger }

func (v vkLogger) log(level slog.Level, msg string) {
	v.l.Log(context.Background(), level, msg, "component", "virtual-kubelet")
}

func (v vkLogger) Debug(a ...any)            { v.log(slog.LevelDebug, fmt.Sprint(a...)) }
func (v vkLogger) Debugf(f string, a ...any) { v.log(slog.LevelDebug, fmt.Sprintf(f, a...)) }
func (v vkLogger) Info(a ...any)             { v.log(slog.LevelInfo, fmt.Sprint(a...)) }
func (v vkLogger) Infof(f string, a ...any)  { v.log(slog.LevelInfo, fmt.Sprintf(f, a...)) }
func (v vkLogger) Warn(a ...any)             { v.log(slog.LevelWarn, fmt.Sprint(a...)) }
func (v vkLogger) Warnf(f string, a ...any)  { v.log(slog.LevelWarn, fmt.Sprintf(f, a...)) }
func (v vkLogger) Error(a ...any)            { v.log(slog.LevelError, fmt.Sprint(a...)) }
func (v vkLogger) Errorf(f string, a ...any) { v.log(slog.LevelError, fmt.Sprintf(f, a...)) }
func (v vkLogger) Fatal(a ...any)            { v.log(slog.LevelError, fmt.Sprint(a...)); os.Exit(1) }
func (v vkLogger) Fatalf(f string, a ...any) {
	v.log(slog.LevelError, fmt.Sprintf(f, a...))
	os.Exit(1)
}
func (v vkLogger) WithField(k string, val any) vklog.Logger { return vkLogger{v.l.With(k, val)} }
func (v vkLogger) WithFields(fs vklog.Fields) vklog.Logger {
	l := v.l
	for k, val := range fs {
		l = l.With(k, val)
	}
	return vkLogger{l}
}
func (v vkLogger) WithError(err error) vklog.Logger { return vkLogger{v.l.With("err", err)} }
