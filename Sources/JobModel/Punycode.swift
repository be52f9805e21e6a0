import Foundation

/// The ASCII form of an internationalised host name (IDNA): each label that is not ASCII written as
/// `xn--` and its Punycode (RFC 3492), after lower-casing and canonical composition. Used only to say
/// what to write instead: jobctl takes hosts as libcurl connects to them, in ASCII, and a host such as
/// `bücher.example` was refused as "invalid" with no word on what would do.
public enum Punycode {
    /// `host` with each non-ASCII label encoded (`bücher.example` → `xn--bcher-kva.example`), or nil when
    /// a label cannot be (a control character, a space, an encoding past the label limits).
    public static func asciiHost(_ host: String) -> String? {
        var labels: [String] = []
        for label in host.precomposedStringWithCanonicalMapping.lowercased().split(separator: ".", omittingEmptySubsequences: false) {
            let scalars = Array(label.unicodeScalars)
            if scalars.allSatisfy(\.isASCII) {
                labels.append(String(label))
                continue
            }
            guard !scalars.contains(where: { $0.value < 0x21 || $0.value == 0x7F }),
                  let encoded = encode(scalars), encoded.count <= 59 else { return nil }
            labels.append("xn--" + encoded)
        }
        return labels.joined(separator: ".")
    }

    /// RFC 3492 §6.3 with its parameters (§5): the basic code points first, a `-`, then the deltas.
    static func encode(_ input: [Unicode.Scalar]) -> String? {
        let base = 36, tMin = 1, tMax = 26
        var output = input.filter(\.isASCII).map { Character($0) }
        let basicCount = output.count
        var handled = basicCount
        if basicCount > 0 { output.append("-") }
        var n = 0x80, delta = 0, bias = 72
        func digit(_ value: Int) -> Character {
            Character(Unicode.Scalar(UInt8(value < 26 ? 0x61 + value : 0x30 + value - 26)))
        }
        func adapt(_ delta: Int, _ points: Int, _ first: Bool) -> Int {
            var delta = first ? delta / 700 : delta / 2
            delta += delta / points
            var k = 0
            while delta > ((base - tMin) * tMax) / 2 {
                delta /= base - tMin
                k += base
            }
            return k + (base - tMin + 1) * delta / (delta + 38)
        }
        while handled < input.count {
            guard let m = input.map({ Int($0.value) }).filter({ $0 >= n }).min() else { return nil }
            let (scaled, overflow) = (m - n).multipliedReportingOverflow(by: handled + 1)
            guard !overflow else { return nil }
            delta += scaled
            n = m
            for scalar in input {
                let c = Int(scalar.value)
                if c < n { delta += 1 }
                if c == n {
                    var q = delta
                    var k = base
                    while true {
                        let t = k <= bias ? tMin : (k >= bias + tMax ? tMax : k - bias)
                        if q < t { break }
                        output.append(digit(t + (q - t) % (base - t)))
                        q = (q - t) / (base - t)
                        k += base
                    }
                    output.append(digit(q))
                    bias = adapt(delta, handled + 1, handled == basicCount)
                    delta = 0
                    handled += 1
                }
            }
            delta += 1
            n += 1
        }
        return String(output)
    }
}
