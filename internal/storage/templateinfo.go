package storage

import "context"

// TemplateInfo returns what List says of template name, reading only its manifest
// (errdefs.ErrNotFound when there is none).
func (s *Store) TemplateInfo(_ context.Context, name string) (TemplateInfo, error) {
	if name == HostTemplate {
		return hostTemplateInfo(), nil
	}
	m, err := s.readManifest(name)
	if err != nil {
		return TemplateInfo{}, err
	}
	return m.info(), nil
}

func hostTemplateInfo() TemplateInfo {
	return TemplateInfo{Name: HostTemplate, Source: "host /usr + synthesized /etc", Builtin: true, Layers: 2}
}
