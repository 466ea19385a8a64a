package moatnode

import (
	"fmt"

	v1 "github.com/moatdev/moat/api/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Reasons reported on Pods (PodStatus.Reason, container state reasons).
const (
	ReasonSandboxGone  = "SandboxVanished"
	ReasonSandboxError = "SandboxError"
	ReasonUnsupported  = "UnsupportedByMoat"
	ReasonCreating     = "SandboxCreating"
)

// Observed is what the agent knows of one Pod's sandbox: the sandbox (nil: it is gone or
// not made yet), whether the Pod has a main command, and that command's record (nil: not
// started yet).
type Observed struct {
	Sandbox *v1.Sandbox
	HasMain bool
	Main    *v1.ProcessLog
	// Gone: the sandbox was made and has since vanished from the daemon.
	Gone bool
	// Err: making the sandbox failed for good (the message is the reason).
	Err error
}

// PodStatus is the status of pod given what is observed of its sandbox. hostIP is the
// node's address, reported as the Pod's IP too: the daemon does not publish sandbox
// addresses (a sandbox's ports are reached through the daemon). Pure.
func PodStatus(pod *corev1.Pod, o Observed, hostIP string) corev1.PodStatus {
	// The QoS class is the API server's (immutable once set).
	st := corev1.PodStatus{HostIP: hostIP, QOSClass: pod.Status.QOSClass}
	if hostIP != "" {
		st.HostIPs = []corev1.HostIP{{IP: hostIP}}
	}
	name := ""
	image := ""
	if len(pod.Spec.Containers) > 0 {
		name, image = pod.Spec.Containers[0].Name, pod.Spec.Containers[0].Image
	}
	cs := corev1.ContainerStatus{Name: name, Image: image, ImageID: image}
	cond := func(ready bool) []corev1.PodCondition {
		s := corev1.ConditionFalse
		if ready {
			s = corev1.ConditionTrue
		}
		return []corev1.PodCondition{
			{Type: corev1.PodScheduled, Status: corev1.ConditionTrue},
			{Type: corev1.PodInitialized, Status: corev1.ConditionTrue},
			{Type: corev1.PodReady, Status: s},
			{Type: corev1.ContainersReady, Status: s},
		}
	}
	terminated := func(code int32, reason, msg string) {
		cs.State = corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: code, Reason: reason, Message: msg}}
		st.Conditions = cond(false)
	}
	switch {
	case o.Err != nil:
		st.Phase, st.Reason, st.Message = corev1.PodFailed, ReasonUnsupported, o.Err.Error()
		terminated(1, ReasonUnsupported, o.Err.Error())
	case o.Gone:
		msg := "the pod's moat sandbox no longer exists on its host"
		st.Phase, st.Reason, st.Message = corev1.PodFailed, ReasonSandboxGone, msg
		terminated(137, ReasonSandboxGone, msg)
	case o.Sandbox == nil:
		st.Phase = corev1.PodPending
		cs.State = corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: ReasonCreating}}
		st.Conditions = cond(false)
	default:
		sb := o.Sandbox
		cs.ContainerID = "moat://" + sb.ID
		st.PodIP = hostIP
		if hostIP != "" {
			st.PodIPs = []corev1.PodIP{{IP: hostIP}}
		}
		started := metav1.NewTime(sb.CreatedAt)
		st.StartTime = &started
		switch {
		case o.HasMain && o.Main != nil && !o.Main.Running:
			code := int32(-1)
			if o.Main.ExitCode != nil {
				code = *o.Main.ExitCode
			}
			reason := "Completed"
			st.Phase = corev1.PodSucceeded
			if code != 0 {
				reason, st.Phase = "Error", corev1.PodFailed
			}
			terminated(code, reason, o.Main.Status)
			cs.State.Terminated.StartedAt = metav1.NewTime(o.Main.Started)
			cs.State.Terminated.ContainerID = cs.ContainerID
		case sb.State == "running" || sb.State == "paused":
			st.Phase = corev1.PodRunning
			cs.State = corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: started}}
			ready := sb.State == "running"
			cs.Ready = ready
			t := true
			cs.Started = &t
			st.Conditions = cond(ready)
		case sb.State == "creating":
			st.Phase = corev1.PodPending
			cs.State = corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: ReasonCreating}}
			st.Conditions = cond(false)
		default: // stopped, error, deleted...
			msg := fmt.Sprintf("sandbox %s is %s", sb.ID, sb.State)
			if sb.Error != "" {
				msg += ": " + sb.Error
			}
			st.Phase, st.Reason, st.Message = corev1.PodFailed, ReasonSandboxError, msg
			terminated(137, ReasonSandboxError, msg)
			cs.State.Terminated.ContainerID = cs.ContainerID
		}
	}
	st.ContainerStatuses = []corev1.ContainerStatus{cs}
	return st
}
