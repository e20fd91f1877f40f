package localpg

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// ExtensionFiles reads the *.control and *.sql files of dir ("" reads nothing), for
// Config.ExtensionFiles: a real pgmq's, for instance.
func ExtensionFiles(dir string) (map[string][]byte, error) {
	if dir == "" {
		return nil, nil
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, err
	}
	files := map[string][]byte{}
	for _, e := range entries {
		if name := e.Name(); !e.IsDir() && (strings.HasSuffix(name, ".control") || strings.HasSuffix(name, ".sql")) {
			if files[name], err = os.ReadFile(filepath.Join(dir, name)); err != nil {
				return nil, err
			}
		}
	}
	if len(files) == 0 {
		return nil, fmt.Errorf("%s holds no extension files (*.control, *.sql)", dir)
	}
	return files, nil
}
