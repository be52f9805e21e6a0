import Foundation
import Synchronization
#if canImport(Glibc)
import Glibc
#endif

/// The sockets of HTTP/1.x connections libcurl keeps for reuse, so a request about to be sent on one
/// (`CURLOPT_PREREQFUNCTION`) can first look whether the connection is still in step with its server.
///
/// Why: an HTTP/1.1 connection carries one answer per request, in order. A server that sent more than
/// its answer (a second response after the first, a body longer than its Content-Length, sent after the
/// answer's last byte) left bytes no request asked for. The libcurl of Debian 12 (7.88) reuses such a
/// connection as alive, and the next request sent on it read the stale bytes as its own answer: three
/// downloads in a row "succeeded" with the bytes of the request before. No byte may be waiting on an
/// idle HTTP/1.x connection (its server speaks only when asked), plain or TLS: pending bytes mean the
/// connection is out of step, and it is closed instead of being used. HTTP/2 connections are not
/// kept here: their servers send frames of their own (PING, SETTINGS, WINDOW_UPDATE) at any time.
///
/// Keyed by the connection's addresses as libcurl names them (`CURLINFO_LOCAL_IP`/`_PORT`,
/// `CURLINFO_PRIMARY_IP`/`_PORT`), which is also what the prerequest callback is handed: one key names
/// one open TCP connection. A socket leaves when libcurl closes it (`CURLOPT_CLOSESOCKETFUNCTION`), so
/// a descriptor number reused later never names a connection it is not.
enum IdleHTTP1Connections {
    private struct Table {
        var socketByKey: [String: Int32] = [:]
        var keyBySocket: [Int32: String] = [:]
    }

    private static let table = Mutex(Table())

    /// The key of a connection from its two ends.
    static func key(localIP: String, localPort: Int, primaryIP: String, primaryPort: Int) -> String {
        "\(localIP) \(localPort) \(primaryIP) \(primaryPort)"
    }

    /// A connection libcurl kept after an HTTP/1.x answer: the next request on it is checked first.
    static func kept(_ socket: Int32, key: String) {
        table.withLock { table in
            if let old = table.keyBySocket[socket] { table.socketByKey[old] = nil }
            table.keyBySocket[socket] = key
            table.socketByKey[key] = socket
        }
    }

    /// A socket that is no (longer an) idle HTTP/1.x connection's: closed, or now carrying HTTP/2.
    static func forget(_ socket: Int32) {
        table.withLock { table in
            guard let key = table.keyBySocket.removeValue(forKey: socket) else { return }
            table.socketByKey[key] = nil
        }
    }

    /// Whether the kept connection named `key` has bytes waiting that no request asked for; if so its
    /// socket is shut down (libcurl then finds it dead, and closes it) and forgotten. False for a
    /// connection not kept here (a new one, or HTTP/2).
    static func closeIfOutOfStep(key: String) -> Bool {
        guard let socket = table.withLock({ $0.socketByKey[key] }), hasUnreadBytes(socket) else { return false }
        forget(socket)
        shutdown(socket, Int32(SHUT_RDWR))
        return true
    }

    /// Whether `socket` has a byte to read now (not merely an end of stream: a server closing an idle
    /// connection is one libcurl already finds dead).
    static func hasUnreadBytes(_ socket: Int32) -> Bool {
        var entry = pollfd(fd: socket, events: Int16(POLLIN), revents: 0)
        guard poll(&entry, 1, 0) > 0, entry.revents & Int16(POLLIN) != 0 else { return false }
        var byte: UInt8 = 0
        return recv(socket, &byte, 1, Int32(MSG_PEEK | MSG_DONTWAIT)) > 0
    }

    /// Connections kept now (tests).
    static var count: Int { table.withLock { $0.keyBySocket.count } }
}
