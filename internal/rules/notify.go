package rules

import (
	"fmt"
	"net/url"
	"strings"

	commoncfg "github.com/prometheus/common/config"
	"github.com/prometheus/common/model"
	"github.com/prometheus/prometheus/config"
	"github.com/prometheus/prometheus/discovery/targetgroup"
)

// alertmanagers turns Alertmanager base URLs into the notifier's
// configuration: one Alertmanager configuration (API v2, Prometheus'
// defaults: a 10 s timeout) and one static target for each URL, under the
// key the notifier gives configuration i ("config-i"). A URL's path is its
// path prefix and its user and password are basic auth.
func alertmanagers(urls []string) (*config.Config, map[string][]*targetgroup.Group, error) {
	conf := &config.Config{}
	targets := map[string][]*targetgroup.Group{}
	for i, raw := range urls {
		u, err := url.Parse(raw)
		if err != nil {
			return nil, nil, fmt.Errorf("rules: alertmanager URL %q: %w", raw, err)
		}
		if u.Scheme != "http" && u.Scheme != "https" || u.Host == "" || u.RawQuery != "" || u.Fragment != "" {
			return nil, nil, fmt.Errorf("rules: alertmanager URL %q: want http(s)://host[:port][/prefix]", raw)
		}
		c := config.DefaultAlertmanagerConfig
		c.Scheme, c.PathPrefix = u.Scheme, strings.TrimSuffix(u.Path, "/")
		if u.User != nil {
			pw, _ := u.User.Password()
			c.HTTPClientConfig.BasicAuth = &commoncfg.BasicAuth{Username: u.User.Username(), Password: commoncfg.Secret(pw)}
		}
		conf.AlertingConfig.AlertmanagerConfigs = append(conf.AlertingConfig.AlertmanagerConfigs, &c)
		targets[fmt.Sprintf("config-%d", i)] = []*targetgroup.Group{{
			Targets: []model.LabelSet{{model.AddressLabel: model.LabelValue(u.Host)}},
			Source:  fmt.Sprint(i),
		}}
	}
	return conf, targets, nil
}
