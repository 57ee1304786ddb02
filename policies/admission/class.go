package admission

// Class is a request's service class, best first.
type Class uint8

// The service classes, as OpenAI's service_tier names them.
const (
	// Priority is interactive work: the lowest time to first token.
	Priority Class = iota
	// Default is ordinary work.
	Default
	// Flex is throughput work: it fills spare capacity, may wait long or
	// be refused.
	Flex
	// NumClasses counts the classes.
	NumClasses
)

var classNames = [NumClasses]string{"priority", "default", "flex"}

// String is the class's service_tier name.
func (c Class) String() string {
	if c < NumClasses {
		return classNames[c]
	}
	return "unknown"
}

// ParseClass reads a service_tier name ("priority", "default", "flex");
// "auto" and "" are for the caller to resolve to the tier's default.
func ParseClass(s string) (Class, bool) {
	for c, n := range classNames {
		if n == s {
			return Class(c), true
		}
	}
	return 0, false
}
