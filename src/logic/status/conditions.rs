//! The condition types of a config's status and every reason they carry.

/// Declares a string-valued enum whose variants serialize to their own names.
macro_rules! names {
    ($(#[$doc:meta])* $name:ident { $($(#[$vdoc:meta])* $variant:ident),* $(,)? }) => {
        $(#[$doc])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
        pub enum $name { $($(#[$vdoc])* $variant),* }

        impl $name {
            pub const ALL: &[$name] = &[$($name::$variant),*];

            pub fn as_str(self) -> &'static str {
                match self { $($name::$variant => stringify!($variant)),* }
            }

            pub fn parse(text: &str) -> Option<Self> {
                Self::ALL.iter().copied().find(|v| v.as_str() == text)
            }
        }

        impl std::fmt::Display for $name {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str(self.as_str())
            }
        }
    };
}

names! {
    /// The conditions of a config's status (`type`).
    ConditionType { Ready, ConfigValid, DriverReady, TemplatesReady, DevicesHealthy, Reconciling, Stalled }
}

names! {
    /// Every `reason` a condition can carry; docs/troubleshooting.md's table lists them.
    Reason {
        Valid, InvalidSpec, Conflict, Unparseable, Unsupported, ForeignObject,
        RolloutComplete, RollingOut, RolloutHalted, Pending, NotApplied, Unfenced,
        Applied, Missing, DeviceClassMissing,
        AllHealthy, Unhealthy,
        Ready, NotReady,
        Paused,
    }
}
