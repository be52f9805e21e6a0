import Foundation

/// A user as messages name them, from the system's user database.
public enum SystemUser {
    /// The user's name, or "uid N" when the id has none.
    public static func name(_ uid: uid_t) -> String {
        guard let entry = getpwuid(uid), let name = entry.pointee.pw_name else { return "uid \(uid)" }
        return String(cString: name)
    }

    /// "name (uid N)", or "uid N" when the id has no name.
    public static func described(_ uid: uid_t) -> String {
        guard let entry = getpwuid(uid), let name = entry.pointee.pw_name else { return "uid \(uid)" }
        return "\(String(cString: name)) (uid \(uid))"
    }
}
