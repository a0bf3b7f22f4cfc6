// Package lb is the userspace data plane of --proxy-mode=userspace: the
// balancer and the TCP, UDP and SCTP relays behind the portal rules that
// redirect/ programs. It never imports redirect/.
//
// It holds no code yet: the userspace mode is issue 3. Until then kproxy runs
// the mode as a preview (see sync/mode/preview) and says so at start.
package lb
