"""Writes estimator/speed/data/hardware.json (run from the repository root: python tools/make_hardware_table.py).

The JSON is the data the code reads; this script shows how each derived figure is computed from the vendor's parts
(SMs x boost clock x the whitepaper's per-SM rate) and keeps the aliases of estimator/fit/data/gpus.json.
"""
import json

T = 1e12
GiB = 2**30
GA102_WP = "https://www.nvidia.com/content/PDF/nvidia-ampere-ga-102-gpu-architecture-whitepaper-v2.pdf"
ADA_WP = "https://images.nvidia.com/aem-dam/Solutions/geforce/ada/nvidia-ada-gpu-architecture.pdf"
BW_WP = "https://images.nvidia.com/aem-dam/Solutions/geforce/blackwell/nvidia-rtx-blackwell-gpu-architecture.pdf"
entries = []


def add(name, vendor, kind, mem_gib, bw_gbs, flops, source, aliases=(), sm=None, cc=None, bf16=True, stated=None, derived=None, **extra):
    e = {"name": name, "aliases": list(aliases), "vendor": vendor, "kind": kind, "memory_bytes": int(mem_gib * GiB),
         "stated": stated or f"{mem_gib:g} GB", "bandwidth_bytes_s": int(bw_gbs * 1e9),
         "flops": {k: int(round(v * T)) for k, v in flops.items() if v}, "compute_units": sm,
         "compute_capability": cc, "native_bf16": bf16, "source": source}
    if derived:
        e["derived"] = derived
    e.update(extra)
    entries.append(e)


def geforce(name, sm, boost_ghz, mem, bw, cc, source, wp, aliases=(), fp8=False, memtype="GDDR6X"):
    """GeForce Ampere/Ada/Blackwell: 1024 dense FP16 tensor FLOPs per SM per clock with FP16 accumulate,
    half of that with FP32 accumulate (the whitepapers' tables); FP32 = 128 lanes x 2 x clock."""
    acc16 = sm * boost_ghz * 1e9 * 1024 / T
    fl = {"fp32": sm * 128 * 2 * boost_ghz * 1e9 / T, "tf32": acc16 / 4, "fp16": acc16 / 2, "bf16": acc16 / 2,
          "fp16_acc16": acc16, "int8": acc16 * 2}
    if fp8:
        fl["fp8"] = acc16 / 2 * 2
    add(name, "nvidia", "gpu", mem, bw, fl, f"{source} ; {wp}", aliases=aliases, sm=sm, cc=cc, stated=f"{mem} GB {memtype}",
        derived=f"tensor FLOP/s = {sm} SMs x {boost_ghz} GHz boost x 1024 dense FP16 FLOPs/SM/clock (FP16 accumulate; half with FP32 accumulate, GeForce), the architecture whitepaper's per-SM rate")


G30 = "https://www.nvidia.com/en-us/geforce/graphics-cards/30-series/"
for n, sm, f, m, bw, al, mt in [("RTX 3060", 28, 1.777, 12, 360, ("GeForce RTX 3060", "3060"), "GDDR6"), ("RTX 3060 Ti", 38, 1.665, 8, 448, ("GeForce RTX 3060 Ti", "3060 Ti"), "GDDR6"),
                       ("RTX 3070", 46, 1.725, 8, 448, ("GeForce RTX 3070", "3070"), "GDDR6"), ("RTX 3070 Ti", 48, 1.77, 8, 608.3, ("GeForce RTX 3070 Ti", "3070 Ti"), "GDDR6X"),
                       ("RTX 3080", 68, 1.71, 10, 760.3, ("GeForce RTX 3080", "3080", "RTX 3080 10GB"), "GDDR6X"), ("RTX 3080 Ti", 80, 1.665, 12, 912.4, ("GeForce RTX 3080 Ti", "3080 Ti"), "GDDR6X"),
                       ("RTX 3090", 82, 1.695, 24, 936.2, (), "GDDR6X"), ("RTX 3090 Ti", 84, 1.86, 24, 1008, ("GeForce RTX 3090 Ti", "3090 Ti"), "GDDR6X")]:
    geforce(n, sm, f, m, bw, "8.6", G30, GA102_WP, al, memtype=mt)
G40 = "https://www.nvidia.com/en-us/geforce/graphics-cards/40-series/"
for n, sm, f, m, bw, al, mt in [("RTX 4060", 24, 2.46, 8, 272, ("GeForce RTX 4060", "4060"), "GDDR6"), ("RTX 4060 Ti", 34, 2.535, 8, 288, ("GeForce RTX 4060 Ti", "4060 Ti", "RTX 4060 Ti 8GB"), "GDDR6"),
                       ("RTX 4060 Ti 16GB", 34, 2.535, 16, 288, ("4060 Ti 16GB",), "GDDR6"), ("RTX 4070", 46, 2.475, 12, 504.2, ("GeForce RTX 4070", "4070"), "GDDR6X"),
                       ("RTX 4070 Super", 56, 2.475, 12, 504.2, ("GeForce RTX 4070 SUPER", "4070 Super"), "GDDR6X"), ("RTX 4070 Ti", 60, 2.61, 12, 504.2, ("GeForce RTX 4070 Ti", "4070 Ti"), "GDDR6X"),
                       ("RTX 4070 Ti Super", 66, 2.61, 16, 672.3, ("GeForce RTX 4070 Ti SUPER", "4070 Ti Super"), "GDDR6X"), ("RTX 4080", 76, 2.505, 16, 716.8, ("GeForce RTX 4080", "4080"), "GDDR6X"),
                       ("RTX 4080 Super", 80, 2.55, 16, 736.3, ("GeForce RTX 4080 SUPER", "4080 Super"), "GDDR6X"), ("RTX 4090", 128, 2.52, 24, 1008, (), "GDDR6X")]:
    geforce(n, sm, f, m, bw, "8.9", G40, ADA_WP, al, fp8=True, memtype=mt)
G50 = "https://www.nvidia.com/en-us/geforce/graphics-cards/50-series/"
for n, sm, f, m, bw, al in [("RTX 5060", 30, 2.497, 8, 448, ("GeForce RTX 5060", "5060")), ("RTX 5060 Ti", 36, 2.572, 16, 448, ("GeForce RTX 5060 Ti", "5060 Ti", "RTX 5060 Ti 16GB")),
                       ("RTX 5070", 48, 2.512, 12, 672, ("GeForce RTX 5070", "5070")), ("RTX 5070 Ti", 70, 2.452, 16, 896, ("GeForce RTX 5070 Ti", "5070 Ti")),
                       ("RTX 5080", 84, 2.617, 16, 960, ("GeForce RTX 5080", "5080")), ("RTX 5090", 170, 2.407, 32, 1792, ())]:
    geforce(n, sm, f, m, bw, "12.0", G50, BW_WP, al, fp8=True, memtype="GDDR7")


def pro(name, sm, boost_ghz, mem, bw, cc, source, wp, aliases=(), fp8=False, memtype="GDDR6"):
    """Professional (RTX A / Ada / PRO) cards: FP16 tensor with FP32 accumulate at the full 1024 FLOPs/SM/clock."""
    acc = sm * boost_ghz * 1e9 * 1024 / T
    fl = {"fp32": sm * 128 * 2 * boost_ghz * 1e9 / T, "tf32": acc / 2, "fp16": acc, "bf16": acc, "int8": acc * 2}
    if fp8:
        fl["fp8"] = acc * 2
    add(name, "nvidia", "gpu", mem, bw, fl, f"{source} ; {wp}", aliases=aliases, sm=sm, cc=cc, stated=f"{mem} GB {memtype} ECC",
        derived=f"tensor FLOP/s = {sm} SMs x {boost_ghz} GHz boost x 1024 dense FP16 FLOPs/SM/clock with FP32 accumulate (professional cards: full rate), the whitepaper's per-SM rate; the datasheet's sparse figure is twice it")


PA = "https://www.nvidia.com/en-us/design-visualization/desktop-graphics/"
pro("RTX A4000", 48, 1.56, 16, 448, "8.6", PA + " (NVIDIA RTX A4000 datasheet)", GA102_WP, ("NVIDIA RTX A4000", "A4000"))
pro("RTX A4500", 56, 1.65, 20, 640, "8.6", PA + " (NVIDIA RTX A4500 datasheet)", GA102_WP, ("NVIDIA RTX A4500", "A4500"))
pro("RTX A5000", 64, 1.695, 24, 768, "8.6", PA + " (NVIDIA RTX A5000 datasheet)", GA102_WP, ("NVIDIA RTX A5000", "A5000"))
pro("RTX A6000", 84, 1.8, 48, 768, "8.6", "https://www.nvidia.com/content/dam/en-zz/Solutions/design-visualization/quadro-product-literature/proviz-print-nvidia-rtx-a6000-datasheet-us-nvidia-1454980-r9-web%20(1).pdf", GA102_WP, ("NVIDIA RTX A6000", "A6000"))
pro("RTX 4000 Ada", 48, 2.175, 20, 360, "8.9", "https://www.nvidia.com/en-us/design-visualization/rtx-4000/", ADA_WP, ("NVIDIA RTX 4000 Ada Generation", "RTX 4000 Ada Generation"), fp8=True)
pro("RTX 5000 Ada", 100, 2.55, 32, 576, "8.9", "https://www.nvidia.com/en-us/design-visualization/rtx-5000/", ADA_WP, ("NVIDIA RTX 5000 Ada Generation", "RTX 5000 Ada Generation"), fp8=True)
pro("RTX 6000 Ada", 142, 2.505, 48, 960, "8.9", "https://www.nvidia.com/en-us/design-visualization/rtx-6000/", ADA_WP, ("NVIDIA RTX 6000 Ada Generation", "RTX 6000 Ada Generation"), fp8=True)
pro("RTX PRO 6000 Blackwell", 188, 2.617, 96, 1792, "12.0", "https://www.nvidia.com/en-us/products/workstations/professional-desktop-gpus/rtx-pro-6000/", BW_WP,
    ("NVIDIA RTX PRO 6000 Blackwell Workstation Edition", "RTX PRO 6000"), fp8=True, memtype="GDDR7")

# Datacenter: the datasheets' dense figures (sparse / 2 where only sparse is printed)
add("T4", "nvidia", "gpu", 16, 320, {"fp32": 8.1, "fp16": 65, "int8": 130}, "https://www.nvidia.com/content/dam/en-zz/Solutions/Data-Center/tesla-t4/t4-tensor-core-datasheet-951643.pdf", sm=40, cc="7.5", bf16=False, stated="16 GB GDDR6")
V100 = "https://images.nvidia.com/content/technologies/volta/pdf/volta-v100-datasheet-update-us-1165301-r5.pdf"
add("V100 16GB", "nvidia", "gpu", 16, 900, {"fp32": 15.7, "fp16": 125}, V100 + " (SXM2)", sm=80, cc="7.0", bf16=False, stated="16 GB HBM2")
add("V100 32GB", "nvidia", "gpu", 32, 900, {"fp32": 15.7, "fp16": 125}, V100 + " (SXM2)", sm=80, cc="7.0", bf16=False, stated="32 GB HBM2")
add("V100 PCIe 16GB", "nvidia", "gpu", 16, 900, {"fp32": 14, "fp16": 112}, V100 + " (PCIe)", aliases=("Tesla V100-PCIE-16GB", "V100-PCIE-16GB"), sm=80, cc="7.0", bf16=False, stated="16 GB HBM2")
add("A10", "nvidia", "gpu", 24, 600, {"fp32": 31.2, "tf32": 62.5, "fp16": 125, "bf16": 125, "int8": 250}, "https://www.nvidia.com/content/dam/en-zz/Solutions/Data-Center/a10/pdf/a10-datasheet.pdf", aliases=("NVIDIA A10",), sm=72, cc="8.6", stated="24 GB GDDR6")
add("A10G", "nvidia", "gpu", 24, 600, {"fp32": 31.2, "tf32": 35, "fp16": 70, "bf16": 70, "int8": 140}, "https://aws.amazon.com/ec2/instance-types/g5/ (A10G: 80 SMs; tensor rate as stated for the G5 instances) ; " + GA102_WP, sm=80, cc="8.6", stated="24 GB GDDR6")
add("A30", "nvidia", "gpu", 24, 933, {"fp32": 10.3, "tf32": 82, "fp16": 165, "bf16": 165, "int8": 330}, "https://www.nvidia.com/content/dam/en-zz/Solutions/data-center/products/a30-gpu/pdf/a30-datasheet.pdf", aliases=("NVIDIA A30",), sm=56, cc="8.0", stated="24 GB HBM2")
add("A40", "nvidia", "gpu", 48, 696, {"fp32": 37.4, "tf32": 74.8, "fp16": 149.7, "bf16": 149.7, "int8": 299.3}, "https://images.nvidia.com/content/Solutions/data-center/a40/nvidia-a40-datasheet.pdf", aliases=("NVIDIA A40",), sm=84, cc="8.6", stated="48 GB GDDR6 ECC")
A100 = "https://www.nvidia.com/content/dam/en-zz/Solutions/Data-Center/a100/pdf/nvidia-a100-datasheet-us-nvidia-1758950-r4-web.pdf"
a100 = {"fp32": 19.5, "tf32": 156, "fp16": 312, "bf16": 312, "int8": 624}
add("A100 40GB", "nvidia", "gpu", 40, 1555, a100, A100, sm=108, cc="8.0", stated="40 GB HBM2")
add("A100 80GB", "nvidia", "gpu", 80, 2039, a100, A100 + " (SXM 2,039 GB/s; the PCIe card 1,935 GB/s)", sm=108, cc="8.0", stated="80 GB HBM2e")
add("L4", "nvidia", "gpu", 24, 300, {"fp32": 30.3, "tf32": 60, "fp16": 121, "bf16": 121, "fp8": 242.5, "int8": 242.5}, "https://resources.nvidia.com/en-us-data-center-overview/l4-gpu-datasheet", sm=58, cc="8.9", stated="24 GB GDDR6")
add("L40", "nvidia", "gpu", 48, 864, {"fp32": 90.5, "tf32": 90.5, "fp16": 181, "bf16": 181, "fp8": 362, "int8": 362}, "https://images.nvidia.com/content/Solutions/data-center/vgpu-L40-datasheet.pdf", aliases=("NVIDIA L40",), sm=142, cc="8.9", stated="48 GB GDDR6 ECC")
add("L40S", "nvidia", "gpu", 48, 864, {"fp32": 91.6, "tf32": 183, "fp16": 362, "bf16": 362, "fp8": 733, "int8": 733}, "https://resources.nvidia.com/en-us-l40s/l40s-datasheet-28413", aliases=("NVIDIA L40S",), sm=142, cc="8.9", stated="48 GB GDDR6 ECC")
H100 = "https://resources.nvidia.com/en-us-tensor-core/nvidia-tensor-core-gpu-datasheet"
h100 = {"fp32": 67, "tf32": 494.5, "fp16": 989.5, "bf16": 989.5, "fp8": 1979, "int8": 1979}
add("H100 80GB", "nvidia", "gpu", 80, 3350, h100, H100 + " (H100 SXM)", sm=132, cc="9.0", stated="80 GB HBM3")
add("H100 PCIe", "nvidia", "gpu", 80, 2000, {"fp32": 51, "tf32": 378, "fp16": 756.5, "bf16": 756.5, "fp8": 1513, "int8": 1513}, H100 + " (H100 PCIe)", sm=114, cc="9.0", stated="80 GB HBM2e")
add("H100 NVL", "nvidia", "gpu", 94, 3900, {"fp32": 60, "tf32": 417.5, "fp16": 835.5, "bf16": 835.5, "fp8": 1670.5, "int8": 1670.5}, H100 + " (H100 NVL, per GPU)", aliases=("NVIDIA H100 NVL",), sm=132, cc="9.0", stated="94 GB HBM3")
add("H200", "nvidia", "gpu", 141, 4800, h100, "https://www.nvidia.com/en-us/data-center/h200/ (H200 SXM)", sm=132, cc="9.0", stated="141 GB HBM3e", memory_bytes_note="141 GB is decimal: 141e9 bytes")
add("B200", "nvidia", "gpu", 180, 8000, {"fp32": 75, "tf32": 1125, "fp16": 2250, "bf16": 2250, "fp8": 4500, "int8": 4500, "fp4": 9000}, "https://www.nvidia.com/en-us/data-center/hgx/ (HGX B200, 8 GPUs: per GPU = the sparse totals / 8 / 2)", sm=148, cc="10.0", stated="180 GB HBM3e")
add("GB200", "nvidia", "gpu", 186, 8000, {"fp32": 80, "tf32": 1250, "fp16": 2500, "bf16": 2500, "fp8": 5000, "int8": 5000, "fp4": 10000}, "https://www.nvidia.com/en-us/data-center/gb200-nvl72/ (GB200 NVL72, 72 GPUs: per GPU = the sparse totals / 72 / 2; 13.4 TB HBM3e / 72)", aliases=("NVIDIA GB200",), sm=148, cc="10.0", stated="186 GB HBM3e")

# AMD
add("MI100", "amd", "gpu", 32, 1228.8, {"fp32": 46.1, "fp16": 184.6, "bf16": 92.3, "int8": 184.6}, "https://www.amd.com/en/products/accelerators/instinct/mi100.html", aliases=("AMD Instinct MI100",), sm=120, stated="32 GB HBM2")
add("MI210", "amd", "gpu", 64, 1638.4, {"fp32": 45.3, "fp16": 181, "bf16": 181, "int8": 181}, "https://www.amd.com/en/products/accelerators/instinct/mi200/mi210.html", aliases=("AMD Instinct MI210",), sm=104, stated="64 GB HBM2e")
add("MI250X", "amd", "gpu", 128, 3276.8, {"fp32": 95.7, "fp16": 383, "bf16": 383, "int8": 383}, "https://www.amd.com/en/products/accelerators/instinct/mi200/mi250x.html (two dies; figures for the package)", aliases=("AMD Instinct MI250X",), sm=220, stated="128 GB HBM2e")
add("MI300X", "amd", "gpu", 192, 5300, {"fp32": 163.4, "tf32": 653.7, "fp16": 1307.4, "bf16": 1307.4, "fp8": 2614.9, "int8": 2614.9}, "https://www.amd.com/content/dam/amd/en/documents/instinct-tech-docs/data-sheets/amd-instinct-mi300x-data-sheet.pdf", sm=304, stated="192 GB HBM3")
add("MI325X", "amd", "gpu", 256, 6000, {"fp32": 163.4, "tf32": 653.7, "fp16": 1307.4, "bf16": 1307.4, "fp8": 2614.9, "int8": 2614.9}, "https://www.amd.com/en/products/accelerators/instinct/mi300/mi325x.html", aliases=("AMD Instinct MI325X",), sm=304, stated="256 GB HBM3E")
RX = "https://www.amd.com/en/products/graphics/desktops/radeon.html"
add("RX 7900 XTX", "amd", "gpu", 24, 960, {"fp32": 61.4, "fp16": 122.8, "bf16": 122.8}, RX + " (Radeon RX 7900 XTX specifications)", aliases=("Radeon RX 7900 XTX", "7900 XTX"), sm=96, stated="24 GB GDDR6")
add("RX 7900 XT", "amd", "gpu", 20, 800, {"fp32": 51.5, "fp16": 103, "bf16": 103}, RX + " (Radeon RX 7900 XT specifications)", aliases=("Radeon RX 7900 XT", "7900 XT"), sm=84, stated="20 GB GDDR6")
add("RX 7800 XT", "amd", "gpu", 16, 624, {"fp32": 37.3, "fp16": 74.6, "bf16": 74.6}, RX + " (Radeon RX 7800 XT specifications)", aliases=("Radeon RX 7800 XT", "7800 XT"), sm=60, stated="16 GB GDDR6")
add("RX 9070 XT", "amd", "gpu", 16, 644.6, {"fp32": 48.7, "fp16": 97.3, "bf16": 97.3}, RX + " (Radeon RX 9070 XT specifications)", aliases=("Radeon RX 9070 XT", "9070 XT"), sm=64, stated="16 GB GDDR6")

# Apple: unified memory; GPU FP32 as Apple states it (M1, M2 families), else cores x 128 ALUs x 2 x GPU clock
APPLE = {
    "M1": (68.25, 2.6, (8, 16), "https://www.apple.com/newsroom/2020/11/apple-unleashes-m1/", False, None),
    "M1 Pro": (200, 5.2, (16, 32), "https://www.apple.com/newsroom/2021/10/introducing-m1-pro-and-m1-max-the-most-powerful-chips-apple-has-ever-built/", False, None),
    "M1 Max": (400, 10.4, (32, 64), "https://www.apple.com/newsroom/2021/10/introducing-m1-pro-and-m1-max-the-most-powerful-chips-apple-has-ever-built/", False, None),
    "M1 Ultra": (800, 21, (64, 128), "https://www.apple.com/newsroom/2022/03/apple-unveils-m1-ultra-the-worlds-most-powerful-chip-for-a-personal-computer/", False, None),
    "M2": (100, 3.6, (8, 16, 24), "https://www.apple.com/newsroom/2022/06/apple-unveils-m2-with-breakthrough-performance-and-capabilities/", True, None),
    "M2 Pro": (200, 6.8, (16, 32), "https://www.apple.com/newsroom/2023/01/apple-unveils-m2-pro-and-m2-max-next-generation-chips-for-next-level-workflows/", True, None),
    "M2 Max": (400, 13.6, (32, 64, 96), "https://www.apple.com/newsroom/2023/01/apple-unveils-m2-pro-and-m2-max-next-generation-chips-for-next-level-workflows/", True, None),
    "M2 Ultra": (800, 27.2, (64, 128, 192), "https://www.apple.com/newsroom/2023/06/apple-introduces-m2-ultra/", True, None),
    "M3": (100, 10 * 128 * 2 * 1.38e9 / T, (8, 16, 24), "https://www.apple.com/newsroom/2023/10/apple-unveils-m3-m3-pro-and-m3-max-the-most-advanced-chips-for-a-personal-computer/", True, "10 GPU cores x 128 FP32 ALUs x 2 x 1.38 GHz (Apple states no FLOP/s for M3)"),
    "M3 Pro": (150, 18 * 128 * 2 * 1.38e9 / T, (18, 36), "https://www.apple.com/newsroom/2023/10/apple-unveils-m3-m3-pro-and-m3-max-the-most-advanced-chips-for-a-personal-computer/", True, "18 GPU cores x 128 x 2 x 1.38 GHz"),
    "M3 Max": (400, 40 * 128 * 2 * 1.38e9 / T, (36, 48, 64, 96, 128), "https://www.apple.com/newsroom/2023/10/apple-unveils-m3-m3-pro-and-m3-max-the-most-advanced-chips-for-a-personal-computer/", True, "40 GPU cores x 128 x 2 x 1.38 GHz (the 40-core part, 400 GB/s; the 30-core part has 300 GB/s)"),
    "M3 Ultra": (819, 80 * 128 * 2 * 1.38e9 / T, (96, 256, 512), "https://www.apple.com/newsroom/2025/03/apple-reveals-m3-ultra-taking-apple-silicon-to-a-new-extreme/", True, "80 GPU cores x 128 x 2 x 1.38 GHz"),
    "M4": (120, 10 * 128 * 2 * 1.58e9 / T, (16, 24, 32), "https://www.apple.com/newsroom/2024/05/apple-introduces-m4-chip/", True, "10 GPU cores x 128 x 2 x 1.58 GHz (Apple states no FLOP/s for M4)"),
    "M4 Pro": (273, 20 * 128 * 2 * 1.58e9 / T, (24, 48, 64), "https://www.apple.com/newsroom/2024/10/apple-introduces-m4-pro-and-m4-max/", True, "20 GPU cores x 128 x 2 x 1.58 GHz"),
    "M4 Max": (546, 40 * 128 * 2 * 1.58e9 / T, (36, 48, 64, 128), "https://www.apple.com/newsroom/2024/10/apple-introduces-m4-pro-and-m4-max/", True, "40 GPU cores x 128 x 2 x 1.58 GHz (the 40-core part, 546 GB/s; the 32-core part has 410 GB/s)"),
}
# the binned Max chips sold only with some memory sizes: M3 Max 14/30 (300 GB/s) with 36 or 96 GB, M4 Max 14/32 (410 GB/s) with 36 GB
BINNED = {("M3 Max", 36): (300, 30 * 128 * 2 * 1.38e9 / T, "30 GPU cores x 128 x 2 x 1.38 GHz (the 30-core M3 Max, 300 GB/s, the one sold with 36 GB)"),
          ("M3 Max", 96): (300, 30 * 128 * 2 * 1.38e9 / T, "30 GPU cores x 128 x 2 x 1.38 GHz (the 30-core M3 Max, 300 GB/s, the one sold with 96 GB)"),
          ("M4 Max", 36): (410, 32 * 128 * 2 * 1.58e9 / T, "32 GPU cores x 128 x 2 x 1.58 GHz (the 32-core M4 Max, 410 GB/s, the one sold with 36 GB)")}
for chip, (bw0, fp320, mems, src, bf16, derived0) in APPLE.items():
    for mem in mems:
        bw, fp32, derived = BINNED.get((chip, mem), (bw0, fp320, derived0))
        fl = {"fp32": fp32, "fp16": fp32, "bf16": fp32 if bf16 else 0}
        add(f"{chip} {mem}GB", "apple", "apple", mem, bw, fl, src, aliases=(f"Apple {chip} {mem}GB",), bf16=bf16, stated=f"{mem} GB unified memory",
            derived=(derived + "; " if derived else "") + "FP16 at the FP32 rate (Apple GPUs run FP16 at the same rate)", chip=chip)

# CPU-only machines: RAM bandwidth = channels x 8 bytes x MT/s (JEDEC); FP32 = cores x 2 FMA units x lanes x 2 x clock
CPU_SRC = "JEDEC DDR4/DDR5 transfer rates (JESD79-4, JESD79-5): bandwidth = channels x 8 bytes x MT/s"
add("CPU DDR4-3200 2ch 32GB", "cpu", "cpu", 32, 51.2, {"fp32": 8 * 2 * 8 * 2 * 4.0e9 / T}, CPU_SRC, aliases=("CPU 32GB",), bf16=None, stated="32 GB DDR4-3200, 2 channels",
    derived="8 cores x 2 AVX2 FMA units x 8 FP32 lanes x 2 x 4.0 GHz")
add("CPU DDR5-5600 2ch 64GB", "cpu", "cpu", 64, 89.6, {"fp32": 8 * 2 * 16 * 2 * 4.5e9 / T}, CPU_SRC, aliases=("CPU 64GB",), bf16=None, stated="64 GB DDR5-5600, 2 channels",
    derived="8 cores x 2 FMA units x 16 FP32 lanes (AVX-512) x 2 x 4.5 GHz")
add("CPU DDR5-4800 8ch 512GB", "cpu", "cpu", 512, 307.2, {"fp32": 32 * 2 * 16 * 2 * 3.0e9 / T}, CPU_SRC, aliases=("CPU server 512GB",), bf16=None, stated="512 GB DDR5-4800, 8 channels",
    derived="32 cores x 2 FMA units x 16 FP32 lanes (AVX-512) x 2 x 3.0 GHz")

for e in entries:
    if e["name"] == "H200":
        e["memory_bytes"] = 141 * 10**9
    if e["name"] == "GB200":
        e["memory_bytes"] = 186 * 10**9
about = ("Hardware for the time model: memory (bytes, the vendor's stated capacity: GB of GDDR/HBM are GiB, 2^30 bytes, except "
         "H200 and GB200 whose 141 GB / 186 GB are decimal), peak memory bandwidth (bytes/s, decimal as vendors state it), dense "
         "peak FLOP/s per compute dtype (no 2:4 sparsity; fp16/bf16 tensor cores with FP32 accumulate unless the key says "
         "fp16_acc16), compute units (SMs / CUs), each with the vendor page it is read from; 'derived' says how a figure is "
         "computed where the vendor states its parts (SMs x clock x per-SM rate from the architecture whitepaper); GPU links: "
         "pcie_bytes_s (the slot's bytes/s in one direction), gpu_link_bytes_s (NVLink, one direction: half the data sheet's "
         "bidirectional figure) and gpu_link_gpus (GPUs it joins), from link_source.")
for e in entries:
    if e.get("chip", "").startswith(("M3", "M4")):
        e["derived"] += "; the GPU clock (1.38 GHz M3, 1.58 GHz M4) is a public measurement, not an Apple figure: FLOP/s approximate"
# Links between GPUs (for the communication of several GPUs, estimator/speed/comm.py). PCIe: the slot's generation and
# lanes as each product page or data sheet states them; bytes/s per direction = lanes x the PCI-SIG transfer rate x 128b/130b
# encoding / 8 (Gen3 8 GT/s: 0.985 GB/s a lane, Gen4 16 GT/s: 1.969, Gen5 32 GT/s: 3.938; x16: 15.75, 31.5, 63.0 GB/s).
# NVLink: the data sheets state the total of both directions ("NVLink: 900GB/s"); per direction is half. gpu_link_gpus: how
# many GPUs the link joins (8 on an HGX/DGX board through NVSwitch, 72 in a GB200 NVL72 rack, 2 for a bridge).
PCIE_LANE_GBS = {3: 8 * 128 / 130 / 8, 4: 16 * 128 / 130 / 8, 5: 32 * 128 / 130 / 8}
PCIE_SRC = "PCI-SIG PCI Express Base Specification 3.0/4.0/5.0 (8/16/32 GT/s per lane, 128b/130b encoding)"
LINKS: dict[str, tuple[int | None, int, float | None, int | None, str]] = {}  # name: (PCIe gen, lanes, NVLink GB/s both directions, GPUs joined, source)
for n in ("RTX 3060", "RTX 3060 Ti", "RTX 3070", "RTX 3070 Ti", "RTX 3080", "RTX 3080 Ti", "RTX 3090 Ti"):
    LINKS[n] = (4, 16, None, None, G30 + " (PCI Express Gen 4)")
LINKS["RTX 3090"] = (4, 16, 112.5, 2, GA102_WP + " (GeForce RTX 3090: third-generation NVLink bridge, 112.5 GB/s total, two GPUs) ; " + G30)
for n in ("RTX 4060", "RTX 4060 Ti", "RTX 4060 Ti 16GB"):
    LINKS[n] = (4, 8, None, None, G40 + " (PCI Express Gen 4 x8)")
for n in ("RTX 4070", "RTX 4070 Super", "RTX 4070 Ti", "RTX 4070 Ti Super", "RTX 4080", "RTX 4080 Super", "RTX 4090"):
    LINKS[n] = (4, 16, None, None, G40 + " (PCI Express Gen 4; no NVLink on Ada GeForce)")
for n in ("RTX 5060", "RTX 5060 Ti"):
    LINKS[n] = (5, 8, None, None, G50 + " (PCI Express Gen 5 x8)")
for n in ("RTX 5070", "RTX 5070 Ti", "RTX 5080", "RTX 5090"):
    LINKS[n] = (5, 16, None, None, G50 + " (PCI Express Gen 5)")
LINKS["RTX A4000"] = (4, 16, None, None, PA + " (NVIDIA RTX A4000 datasheet: PCI Express Gen 4 x16)")
for n in ("RTX A4500", "RTX A5000", "RTX A6000"):
    LINKS[n] = (4, 16, 112.5, 2, PA + f" (NVIDIA {n} datasheet: PCI Express Gen 4 x16; NVLink bridge 112.5 GB/s bidirectional, two GPUs)")
for n in ("RTX 4000 Ada", "RTX 5000 Ada", "RTX 6000 Ada"):
    LINKS[n] = (4, 16, None, None, PA + f" ({n} datasheet: PCI Express Gen 4 x16, no NVLink)")
LINKS["RTX PRO 6000 Blackwell"] = (5, 16, None, None, "https://www.nvidia.com/en-us/products/workstations/professional-desktop-gpus/rtx-pro-6000/ (PCI Express Gen 5 x16)")
LINKS["T4"] = (3, 16, None, None, "https://www.nvidia.com/content/dam/en-zz/Solutions/Data-Center/tesla-t4/t4-tensor-core-datasheet-951643.pdf (PCIe Gen3 x16)")
for n in ("V100 16GB", "V100 32GB"):
    LINKS[n] = (3, 16, 300, 8, V100 + " (V100 SXM2: NVLink 300 GB/s; PCIe Gen3 32 GB/s both directions)")
LINKS["V100 PCIe 16GB"] = (3, 16, None, None, V100 + " (V100 PCIe: PCIe Gen3 32 GB/s both directions)")
LINKS["A10"] = (4, 16, None, None, "https://www.nvidia.com/content/dam/en-zz/Solutions/Data-Center/a10/pdf/a10-datasheet.pdf (PCIe Gen4 64 GB/s both directions)")
LINKS["A10G"] = (4, 16, None, None, "https://aws.amazon.com/ec2/instance-types/g5/ (A10G, PCIe Gen4)")
LINKS["A30"] = (4, 16, 200, 2, "https://www.nvidia.com/content/dam/en-zz/Solutions/data-center/products/a30-gpu/pdf/a30-datasheet.pdf (PCIe Gen4 64 GB/s; third-gen NVLink bridge 200 GB/s)")
LINKS["A40"] = (4, 16, 112.5, 2, "https://images.nvidia.com/content/Solutions/data-center/a40/nvidia-a40-datasheet.pdf (PCIe Gen4 x16; NVLink bridge 112.5 GB/s bidirectional, two GPUs)")
for n in ("A100 40GB", "A100 80GB"):
    LINKS[n] = (4, 16, 600, 8, A100 + " (A100 SXM: NVLink 600 GB/s, HGX A100 NVSwitch; PCIe Gen4 64 GB/s)")
for n, src in (("L4", "https://resources.nvidia.com/en-us-data-center-overview/l4-gpu-datasheet"),
               ("L40", "https://images.nvidia.com/content/Solutions/data-center/vgpu-L40-datasheet.pdf"),
               ("L40S", "https://resources.nvidia.com/en-us-l40s/l40s-datasheet-28413")):
    LINKS[n] = (4, 16, None, None, src + " (PCIe Gen4 x16 64 GB/s, no NVLink)")
LINKS["H100 80GB"] = (5, 16, 900, 8, H100 + " (H100 SXM: NVLink 900 GB/s, HGX H100 NVSwitch; PCIe Gen5 128 GB/s)")
LINKS["H100 PCIe"] = (5, 16, 600, 2, H100 + " (H100 PCIe: NVLink bridge 600 GB/s; PCIe Gen5 128 GB/s)")
LINKS["H100 NVL"] = (5, 16, 600, 2, H100 + " (H100 NVL: NVLink 600 GB/s, a pair; PCIe Gen5 128 GB/s)")
LINKS["H200"] = (5, 16, 900, 8, "https://www.nvidia.com/en-us/data-center/h200/ (H200 SXM: NVLink 900 GB/s; PCIe Gen5 128 GB/s)")
LINKS["B200"] = (5, 16, 1800, 8, "https://www.nvidia.com/en-us/data-center/hgx/ (HGX B200: fifth-generation NVLink 1.8 TB/s per GPU, NVSwitch; PCIe Gen5)")
LINKS["GB200"] = (None, 0, 1800, 72, "https://www.nvidia.com/en-us/data-center/gb200-nvl72/ (NVLink 1.8 TB/s per GPU across the 72 GPUs of the rack)")
for n in ("MI100", "MI210", "MI250X"):
    LINKS[n] = (4, 16, None, None, "AMD Instinct data sheet (PCIe Gen4 x16; the Infinity Fabric links between GPUs are not modelled here)")
for n in ("MI300X", "MI325X"):
    LINKS[n] = (5, 16, None, None, "AMD Instinct data sheet (PCIe Gen5 x16; the Infinity Fabric links between GPUs are not modelled here)")
for n in ("RX 7900 XTX", "RX 7900 XT", "RX 7800 XT"):
    LINKS[n] = (4, 16, None, None, RX + " (PCI Express 4.0 x16)")
LINKS["RX 9070 XT"] = (5, 16, None, None, RX + " (PCI Express 5.0 x16)")
for e in entries:
    if e["name"] not in LINKS:
        continue
    gen, lanes, nvlink, joined, src = LINKS[e["name"]]
    e["pcie_bytes_s"] = int(round(PCIE_LANE_GBS[gen] * lanes * 1e9)) if gen else None
    e["pcie"] = f"PCIe Gen{gen} x{lanes}" if gen else None
    e["gpu_link_bytes_s"] = int(nvlink / 2 * 1e9) if nvlink else None
    e["gpu_link_gpus"] = joined
    e["link_source"] = src + " ; " + PCIE_SRC
# Board power (estimator.speed.hardware.power_capped): the power NVIDIA's spec pages state for the reference / Founders
# Edition board, at which the rated boost clock of 'derived' is held; only for the cards whose power a measured run caps.
BOARD_POWER = {"RTX 3070": (220, G30), "RTX 3080": (320, G30), "RTX 3080 Ti": (350, G30), "RTX 3090": (350, G30), "RTX 4070 Ti": (285, G40)}
for e in entries:
    if e["name"] in BOARD_POWER:
        watts, page = BOARD_POWER[e["name"]]
        label = "'Graphics Card Power (W)'" if page == G30 else "'Total Graphics Power (W)'"
        e["board_power_w"] = watts
        e["board_power_source"] = f"{page} (the full specs' {label}: {watts} W, the Founders Edition / reference board)"
with open("estimator/fit/data/gpus.json", encoding="utf-8") as f:
    fit = {g["name"]: g for g in json.load(f)["gpus"]}
for e in entries:
    if e["name"] in fit:
        names = {x["name"] for x in entries}
        e["aliases"] = list(dict.fromkeys([*(a for a in fit[e["name"]]["aliases"] if a not in names), *e["aliases"]]))
with open("estimator/speed/data/hardware.json", "w", encoding="utf-8") as f:
    json.dump({"about": about, "hardware": entries}, f, indent=1)
print(len(entries))
