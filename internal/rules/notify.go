package rules

import (
	"fmt"
	"net/url"
	"strings"

	commoncfg "github.com/prometheus/common/config"
	"github.com/prometheus/common/model"
	"github.com/prometheus/prometheus/config"
	"github.com/prometheus/prometheus/discovery/targetgroup"
	"github.com/spf13/pflag"
)

// AlertmanagerClient is how every Alertmanager is reached beyond what
// its URL says: TLS (Prometheus' tls_config) and a bearer token, each
// file read by Prometheus' HTTP client (a token file and certificates
// again as they change).
type AlertmanagerClient struct {
	// CAFile verifies the Alertmanagers' certificates (PEM; default: the
	// system's roots).
	CAFile string
	// CertFile and KeyFile are a client certificate to present (PEM; both
	// or neither).
	CertFile, KeyFile string
	// ServerName, if set, is the name their certificates must hold
	// (default: the URL's host).
	ServerName string
	// BearerTokenFile holds a token sent as "Authorization: Bearer"; not
	// with a URL's user:password.
	BearerTokenFile string
}

// AddFlags adds the flags of the connection to Alertmanager
// (docs/rules.md) to fs.
func (c *AlertmanagerClient) AddFlags(fs *pflag.FlagSet) {
	fs.StringVar(&c.CAFile, "alertmanager-tls-ca-file", "", "PEM CA that verifies Alertmanager's certificate (default: the system's roots)")
	fs.StringVar(&c.CertFile, "alertmanager-tls-cert-file", "", "PEM client certificate presented to Alertmanager (with --alertmanager-tls-key-file)")
	fs.StringVar(&c.KeyFile, "alertmanager-tls-key-file", "", "PEM key of --alertmanager-tls-cert-file")
	fs.StringVar(&c.ServerName, "alertmanager-tls-server-name", "", "name Alertmanager's certificate must hold (default: the URL's host)")
	fs.StringVar(&c.BearerTokenFile, "alertmanager-bearer-token-file", "", "file holding a token sent to Alertmanager as Authorization: Bearer (not with a URL's user:password)")
}

// alertmanagers turns Alertmanager base URLs into the notifier's
// configuration: one Alertmanager configuration (API v2, Prometheus'
// defaults: a 10 s timeout) and one static target for each URL, under the
// key the notifier gives configuration i ("config-i"). A URL's path is its
// path prefix and its user and password are basic auth; client gives TLS
// and a bearer token to every one.
func alertmanagers(urls []string, client AlertmanagerClient) (*config.Config, map[string][]*targetgroup.Group, error) {
	if (client.CertFile == "") != (client.KeyFile == "") {
		return nil, nil, fmt.Errorf("rules: alertmanager client certificate: give both the certificate file and the key file")
	}
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
		c.HTTPClientConfig.TLSConfig = commoncfg.TLSConfig{CAFile: client.CAFile, CertFile: client.CertFile, KeyFile: client.KeyFile, ServerName: client.ServerName}
		c.HTTPClientConfig.BearerTokenFile = client.BearerTokenFile
		if err := c.HTTPClientConfig.Validate(); err != nil {
			return nil, nil, fmt.Errorf("rules: alertmanager %q: %w", u.Redacted(), err)
		}
		conf.AlertingConfig.AlertmanagerConfigs = append(conf.AlertingConfig.AlertmanagerConfigs, &c)
		targets[fmt.Sprintf("config-%d", i)] = []*targetgroup.Group{{
			Targets: []model.LabelSet{{model.AddressLabel: model.LabelValue(u.Host)}},
			Source:  fmt.Sprint(i),
		}}
	}
	return conf, targets, nil
}
