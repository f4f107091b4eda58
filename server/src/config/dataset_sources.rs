//! `[kube.dataset_sources.<name>]`: where a cluster's shared datasets lie, as the storage a
//! PersistentVolume names. A dataset registered on a cluster gives one of these names as its
//! `claim`; the server then makes, in each permitted user's namespace, a read-only volume and
//! claim pre-bound to each other from the source written here (`runtime/kube/datasets.rs`).
//!
//! The two shapes a K3s admin writes in a PersistentVolume, in TOML:
//!
//! ```toml
//! [kube.dataset_sources.imagenet]
//! nfs = { server = "nfs.lab.internal", path = "/exports/imagenet" }
//!
//! [kube.dataset_sources.corpus]
//! csi = { driver = "smb.csi.k8s.io", volume_handle = "corpus", volume_attributes = { source = "//fs/corpus" } }
//! ```
//!
//! Why in the configuration, not in the registration: a volume's source reaches storage outside
//! every namespace's quota and policy (any NFS export the nodes reach, any CSI volume by its
//! handle, another tenant's disk included). Who may name one is whoever deploys the server (the
//! same hands that write the chart's values and its RBAC), not every admin of the product
//! through a form; the product's admins choose which configured source to publish, and to whom.

use super::InvalidKey;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// One source: exactly one of `nfs` or `csi`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DatasetSource {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub nfs: Option<NfsSource>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub csi: Option<CsiSource>,
}

/// An NFS export (a PersistentVolume's `nfs`).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NfsSource {
    /// Host name or address of the NFS server.
    pub server: String,
    /// The exported path.
    pub path: String,
}

/// A volume of a CSI driver installed in the cluster (a PersistentVolume's `csi`).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CsiSource {
    /// The driver's name, e.g. `smb.csi.k8s.io`.
    pub driver: String,
    /// The volume's id to the driver.
    pub volume_handle: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub fs_type: String,
    /// The driver's own settings for this volume.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub volume_attributes: BTreeMap<String, String>,
}

/// The longest volume handle taken (the CSI spec bounds strings at 128 bytes).
const MAX_HANDLE: usize = 128;

fn plain(text: &str) -> bool {
    !text.trim().is_empty() && !text.chars().any(|c| c.is_control() || c.is_whitespace())
}

impl DatasetSource {
    /// What is wrong with this source, if anything (`key` is its table's name).
    pub fn check(&self) -> Result<(), String> {
        match (&self.nfs, &self.csi) {
            (Some(_), Some(_)) => Err("give nfs or csi, not both".into()),
            (None, None) => Err(
                "give the dataset's storage: nfs = { server, path } or csi = { driver, volume_handle }"
                    .into(),
            ),
            (Some(nfs), None) => {
                let host_ok = plain(&nfs.server)
                    && nfs.server.len() <= 253
                    && !nfs.server.contains('/')
                    && !nfs.server.starts_with('-');
                if !host_ok {
                    return Err(format!(
                        "nfs.server `{}` is not a host name or address",
                        app::domain::encode::shown(&nfs.server)
                    ));
                }
                if !nfs.path.starts_with('/')
                    || !plain(&nfs.path)
                    || nfs.path.split('/').any(|p| p == "." || p == "..")
                {
                    return Err(format!(
                        "nfs.path `{}` is not an absolute export path without `.` or `..`",
                        app::domain::encode::shown(&nfs.path)
                    ));
                }
                Ok(())
            }
            (None, Some(csi)) => {
                if csi.driver.len() > 63 || !super::kube::is_dns_subdomain(&csi.driver) {
                    return Err(format!(
                        "csi.driver `{}` is not a CSI driver's name (a DNS name of at most 63 characters)",
                        app::domain::encode::shown(&csi.driver)
                    ));
                }
                if !plain(&csi.volume_handle) || csi.volume_handle.len() > MAX_HANDLE {
                    return Err(format!(
                        "csi.volume_handle must be 1 to {MAX_HANDLE} characters without spaces"
                    ));
                }
                if !csi.fs_type.is_empty() && !plain(&csi.fs_type) {
                    return Err("csi.fs_type must be a file system's name, e.g. ext4".into());
                }
                Ok(())
            }
        }
    }
}

/// Checks every source; the error names the key and why.
pub fn check_all(sources: &BTreeMap<String, DatasetSource>) -> Result<(), InvalidKey> {
    for (name, source) in sources {
        let key = format!("kube.dataset_sources.{name}");
        if !super::kube::is_dns_subdomain(name) {
            return Err(InvalidKey::new(
                key,
                "a source's name is what a dataset's claim gives: lowercase letters, digits, '-' and '.'",
            ));
        }
        source.check().map_err(|why| InvalidKey::new(key, why))?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(text: &str) -> Result<BTreeMap<String, DatasetSource>, String> {
        #[derive(Deserialize)]
        struct Wrap {
            dataset_sources: BTreeMap<String, DatasetSource>,
        }
        let wrap: Wrap = figment::Figment::from(
            <figment::providers::Toml as figment::providers::Format>::string(text),
        )
        .extract()
        .map_err(|e| e.to_string())?;
        check_all(&wrap.dataset_sources).map_err(|e| format!("{}: {}", e.0, e.1))?;
        Ok(wrap.dataset_sources)
    }

    #[test]
    fn an_nfs_export_and_a_csi_volume_read_as_a_pv_writes_them() {
        let sources = parse(
            r#"
            [dataset_sources.imagenet]
            nfs = { server = "10.0.0.5", path = "/exports/imagenet" }
            [dataset_sources.corpus]
            csi = { driver = "smb.csi.k8s.io", volume_handle = "corpus", volume_attributes = { source = "//fs/corpus" } }
            "#,
        )
        .unwrap();
        assert_eq!(sources["imagenet"].nfs.as_ref().unwrap().server, "10.0.0.5");
        let csi = sources["corpus"].csi.as_ref().unwrap();
        assert_eq!(csi.volume_attributes["source"], "//fs/corpus");
    }

    #[test]
    fn a_bad_source_names_its_key_and_why() {
        let cases = [
            ("[dataset_sources.a]\n", "give the dataset's storage"),
            (
                "[dataset_sources.a]\nnfs = { server = \"h\", path = \"/x\" }\ncsi = { driver = \"d.io\", volume_handle = \"v\" }\n",
                "not both",
            ),
            (
                "[dataset_sources.a]\nnfs = { server = \"h\", path = \"exports\" }\n",
                "absolute",
            ),
            (
                "[dataset_sources.a]\nnfs = { server = \"h\", path = \"/exports/../etc\" }\n",
                "absolute",
            ),
            (
                "[dataset_sources.a]\nnfs = { server = \"a b\", path = \"/x\" }\n",
                "host name",
            ),
            (
                "[dataset_sources.a]\ncsi = { driver = \"Not_A_Driver\", volume_handle = \"v\" }\n",
                "driver",
            ),
            (
                "[dataset_sources.a]\ncsi = { driver = \"d.io\", volume_handle = \"\" }\n",
                "volume_handle",
            ),
            (
                "[dataset_sources.Big]\nnfs = { server = \"h\", path = \"/x\" }\n",
                "source's name",
            ),
        ];
        for (text, said) in cases {
            let err = parse(text).unwrap_err();
            assert!(err.contains(said), "{text}: {err}");
        }
        assert!(
            parse("[dataset_sources.a]\nnfs = { server = \"h\", path = \"/x\", size = 1 }\n")
                .unwrap_err()
                .contains("unknown field")
        );
    }
}
