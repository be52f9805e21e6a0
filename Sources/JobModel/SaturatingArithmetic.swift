/// Arithmetic on values read from a log, which another program or a hand may have written: a sum,
/// product or increment past the type's range stops at the range's end instead of trapping (Swift's
/// `+` ends the process on overflow: `jobctl list` and `stats`, and a worker claiming the job, once
/// did on a row holding 2⁶³ − 1).
extension FixedWidthInteger {
    /// `self + other`, or the bound on the side it passed.
    public func saturatingAdding(_ other: Self) -> Self {
        let (sum, overflow) = addingReportingOverflow(other)
        guard overflow else { return sum }
        return other > 0 ? .max : .min
    }

    /// `self - other`, or the bound on the side it passed.
    public func saturatingSubtracting(_ other: Self) -> Self {
        let (difference, overflow) = subtractingReportingOverflow(other)
        guard overflow else { return difference }
        return other < 0 ? .max : .min
    }

    /// `self * other`, or the bound on the side it passed.
    public func saturatingMultiplied(by other: Self) -> Self {
        let (product, overflow) = multipliedReportingOverflow(by: other)
        guard overflow else { return product }
        return (self < 0) == (other < 0) ? .max : .min
    }
}

extension Double {
    /// The integer nearest below this value, held within `Int64`'s range (NaN is 0): for ratios and
    /// rates made of logged values.
    public var clampedInt64: Int64 {
        guard !isNaN else { return 0 }
        if self >= 9_223_372_036_854_775_807.0 { return .max }
        if self <= -9_223_372_036_854_775_808.0 { return .min }
        return Int64(rounded(.down))
    }
}
