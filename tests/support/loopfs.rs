//! A small ext4 file system on a loop device, for tests that fill a disk (root only).

use std::path::{Path, PathBuf};

/// Mounts a 48 MiB ext4 image on a loop device under `at` (root only); unmounts on drop.
pub struct LoopFs {
    pub mnt: PathBuf,
}

impl LoopFs {
    pub fn mount(at: &Path) -> Result<LoopFs, String> {
        let img = at.join("fs.img");
        let mnt = at.join("mnt");
        std::fs::create_dir_all(&mnt).map_err(|e| e.to_string())?;
        let f = std::fs::File::create(&img).map_err(|e| e.to_string())?;
        f.set_len(48 << 20).map_err(|e| e.to_string())?;
        let run = |cmd: &mut std::process::Command| -> Result<(), String> {
            let out = cmd.output().map_err(|e| format!("{cmd:?}: {e}"))?;
            if out.status.success() {
                Ok(())
            } else {
                Err(format!("{cmd:?}: {}", String::from_utf8_lossy(&out.stderr)))
            }
        };
        run(std::process::Command::new("mkfs.ext4")
            .args(["-q", "-F"])
            .arg(&img))?;
        run(std::process::Command::new("mount")
            .args(["-o", "loop"])
            .arg(&img)
            .arg(&mnt))?;
        Ok(LoopFs { mnt })
    }
}

impl Drop for LoopFs {
    fn drop(&mut self) {
        let ok = std::process::Command::new("umount")
            .arg(&self.mnt)
            .status()
            .is_ok_and(|s| s.success());
        if !ok {
            let _ = std::process::Command::new("umount")
                .arg("-l")
                .arg(&self.mnt)
                .status();
        }
    }
}
