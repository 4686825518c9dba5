use std::fmt;
use std::str::FromStr;

use crate::BlocksError;

/// The kind of surface a session runs on; selects the `surface/<kind>/`
/// sub-layer and the generated `Surface:` line.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub enum SurfaceKind {
    /// An interactive terminal.
    #[default]
    Cli,
    /// The desktop application.
    Desktop,
    /// A headless server process answering API calls.
    Server,
    /// A gateway chat (a bot in a chat platform).
    Chat,
    /// A background job with no one watching.
    Background,
}

impl SurfaceKind {
    /// Every surface kind.
    pub const ALL: [SurfaceKind; 5] = [
        SurfaceKind::Cli,
        SurfaceKind::Desktop,
        SurfaceKind::Server,
        SurfaceKind::Chat,
        SurfaceKind::Background,
    ];

    /// The stable string used in paths, flags and JSON.
    pub fn wire_name(self) -> &'static str {
        match self {
            SurfaceKind::Cli => "cli",
            SurfaceKind::Desktop => "desktop",
            SurfaceKind::Server => "server",
            SurfaceKind::Chat => "chat",
            SurfaceKind::Background => "background",
        }
    }

    /// The runtime's own observation of the surface, rendered as the body of
    /// the `Surface:` line. Code-owned: no layer can name or rewrite it.
    pub fn observation(self) -> &'static str {
        match self {
            SurfaceKind::Cli => {
                "command line; a person reads your replies in a terminal and can answer follow-up questions."
            }
            SurfaceKind::Desktop => {
                "desktop application; a person reads rendered markdown and can approve or decline actions."
            }
            SurfaceKind::Server => {
                "server API; replies are read by another program, so keep them structured and self-contained."
            }
            SurfaceKind::Chat => {
                "gateway chat; replies land in a chat thread that other people may read, so keep them short."
            }
            SurfaceKind::Background => {
                "background job; nobody is watching live, so record what you did and stop when unsure."
            }
        }
    }
}

impl fmt::Display for SurfaceKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.wire_name())
    }
}

impl FromStr for SurfaceKind {
    type Err = BlocksError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        SurfaceKind::ALL
            .into_iter()
            .find(|kind| kind.wire_name() == s)
            .ok_or_else(|| BlocksError::UnknownSurface(s.to_owned()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip() {
        for kind in SurfaceKind::ALL {
            assert_eq!(kind.wire_name().parse::<SurfaceKind>(), Ok(kind));
        }
        assert!("../cli".parse::<SurfaceKind>().is_err());
    }
}
