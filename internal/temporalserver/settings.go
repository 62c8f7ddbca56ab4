package temporalserver

import (
	"errors"
	"fmt"
	"strings"

	"go.temporal.io/server/common/dynamicconfig"
)

// ParseSetting reads one dynamic-config override, "key=value", as the server's own config file
// would (the value is YAML: 64, 0.5, true, 10s). A key the server does not know, or a value its
// setting refuses, is an error: the server itself would only log it and go on with its default.
func ParseSetting(kv string) (string, any, error) {
	key, value, ok := strings.Cut(kv, "=")
	key = strings.TrimSpace(key)
	if !ok || key == "" || strings.TrimSpace(value) == "" {
		return "", nil, fmt.Errorf("dynamic config setting %q: want key=value", kv)
	}
	if strings.ContainsAny(value, "\n\r") {
		return "", nil, fmt.Errorf("dynamic config setting %q: the value is one line", key)
	}
	var lr dynamicconfig.YamlLoader
	lr.LoadValue(dynamicconfig.MakeKey(key), []byte("- value: "+value))
	if err := errors.Join(append(lr.Errors, lr.Warnings...)...); err != nil {
		return "", nil, fmt.Errorf("dynamic config setting %q: %w", key, err)
	}
	cvs := lr.Map[dynamicconfig.MakeKey(key)]
	if len(cvs) != 1 {
		return "", nil, fmt.Errorf("dynamic config setting %q: no value", key)
	}
	return key, cvs[0].Value, nil
}
