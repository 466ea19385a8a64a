// Package kubeapi is the small part of the Kubernetes API the cluster front (moat serve
// --cluster) uses: Pods and Nodes over the API server's REST interface, with the
// credentials of a kubeconfig file or of a Pod's service account. It is written against
// the API's JSON directly, so that the moat binary carries no Kubernetes client library.
package kubeapi

import "time"

// ObjectMeta is the subset of metav1.ObjectMeta moat reads and writes.
type ObjectMeta struct {
	Name              string            `json:"name,omitempty"`
	GenerateName      string            `json:"generateName,omitempty"`
	Namespace         string            `json:"namespace,omitempty"`
	UID               string            `json:"uid,omitempty"`
	ResourceVersion   string            `json:"resourceVersion,omitempty"`
	CreationTimestamp *time.Time        `json:"creationTimestamp,omitempty"`
	DeletionTimestamp *time.Time        `json:"deletionTimestamp,omitempty"`
	Labels            map[string]string `json:"labels,omitempty"`
	Annotations       map[string]string `json:"annotations,omitempty"`
}

// Pod is the subset of corev1.Pod moat reads and writes.
type Pod struct {
	APIVersion string     `json:"apiVersion,omitempty"`
	Kind       string     `json:"kind,omitempty"`
	Metadata   ObjectMeta `json:"metadata"`
	Spec       PodSpec    `json:"spec"`
	Status     PodStatus  `json:"status,omitempty"`
}

// PodSpec is the subset of corev1.PodSpec moat sets.
type PodSpec struct {
	NodeName                      string            `json:"nodeName,omitempty"`
	NodeSelector                  map[string]string `json:"nodeSelector,omitempty"`
	RuntimeClassName              *string           `json:"runtimeClassName,omitempty"`
	RestartPolicy                 string            `json:"restartPolicy,omitempty"`
	TerminationGracePeriodSeconds *int64            `json:"terminationGracePeriodSeconds,omitempty"`
	AutomountServiceAccountToken  *bool             `json:"automountServiceAccountToken,omitempty"`
	Tolerations                   []Toleration      `json:"tolerations,omitempty"`
	Containers                    []Container       `json:"containers"`
}

// Toleration is corev1.Toleration.
type Toleration struct {
	Key               string `json:"key,omitempty"`
	Operator          string `json:"operator,omitempty"`
	Value             string `json:"value,omitempty"`
	Effect            string `json:"effect,omitempty"`
	TolerationSeconds *int64 `json:"tolerationSeconds,omitempty"`
}

// Container is the subset of corev1.Container moat sets.
type Container struct {
	Name      string               `json:"name"`
	Image     string               `json:"image"`
	Command   []string             `json:"command,omitempty"`
	Args      []string             `json:"args,omitempty"`
	Env       []EnvVar             `json:"env,omitempty"`
	Resources ResourceRequirements `json:"resources,omitempty"`
}

// EnvVar is a literal corev1.EnvVar (moat never sets valueFrom).
type EnvVar struct {
	Name  string `json:"name"`
	Value string `json:"value"`
}

// ResourceRequirements holds quantities as strings ("500m", "512Mi").
type ResourceRequirements struct {
	Limits   map[string]string `json:"limits,omitempty"`
	Requests map[string]string `json:"requests,omitempty"`
}

// PodStatus is the subset of corev1.PodStatus moat reads.
type PodStatus struct {
	Phase             string            `json:"phase,omitempty"`
	Reason            string            `json:"reason,omitempty"`
	Message           string            `json:"message,omitempty"`
	PodIP             string            `json:"podIP,omitempty"`
	StartTime         *time.Time        `json:"startTime,omitempty"`
	Conditions        []Condition       `json:"conditions,omitempty"`
	ContainerStatuses []ContainerStatus `json:"containerStatuses,omitempty"`
}

// Condition is a Pod or Node condition.
type Condition struct {
	Type    string `json:"type"`
	Status  string `json:"status"`
	Reason  string `json:"reason,omitempty"`
	Message string `json:"message,omitempty"`
}

// ContainerStatus is the subset of corev1.ContainerStatus moat reads.
type ContainerStatus struct {
	Name        string         `json:"name"`
	ContainerID string         `json:"containerID,omitempty"`
	Ready       bool           `json:"ready"`
	State       ContainerState `json:"state,omitempty"`
}

// ContainerState is corev1.ContainerState, reduced to what moat reads.
type ContainerState struct {
	Waiting *struct {
		Reason  string `json:"reason,omitempty"`
		Message string `json:"message,omitempty"`
	} `json:"waiting,omitempty"`
	Running *struct {
		StartedAt *time.Time `json:"startedAt,omitempty"`
	} `json:"running,omitempty"`
	Terminated *struct {
		ExitCode int32  `json:"exitCode"`
		Reason   string `json:"reason,omitempty"`
		Message  string `json:"message,omitempty"`
	} `json:"terminated,omitempty"`
}

// Node is the subset of corev1.Node moat reads.
type Node struct {
	Metadata ObjectMeta `json:"metadata"`
	Status   struct {
		Conditions []Condition `json:"conditions,omitempty"`
		Addresses  []struct {
			Type    string `json:"type"`
			Address string `json:"address"`
		} `json:"addresses,omitempty"`
	} `json:"status,omitempty"`
}
