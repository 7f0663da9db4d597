// A Rust `extern "C"` function whose arguments utrace captures (-A 'scale@arg1,arg2/32'): prints
// the line utrace's replay must show for each call.
use std::hint::black_box;

#[no_mangle]
#[inline(never)]
pub extern "C" fn scale(x: i64, factor: i32) -> i64 {
    x * i64::from(factor)
}

fn main() {
    for (x, factor) in [(7i64, 3i32), (-2, 5), (1 << 40, -1)] {
        let scaled = scale(black_box(x), black_box(factor));
        println!("  scale({x}, {factor}) = {scaled};");
    }
}
